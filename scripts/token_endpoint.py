#!/usr/bin/env python3
"""An OAuth 2.0 token endpoint for the local stack (stdlib Python).

Two kinds of client ask it for access tokens:

1. Google's template in schemaRegistryAuthenticationMode=OAUTH: the Confluent client
   takes schemaRegistryOauthTokenEndpointUrl, ClientId and the client secret and uses
   the client credentials grant (RFC 6749 §4.4; docs/research/google-commands.md §3):

     POST /token  grant_type=client_credentials [&scope=...]
       client authentication by HTTP Basic (client_secret_basic, which RFC 6749 §2.3.1
       says the server "MUST support") or by the form fields client_id and
       client_secret (client_secret_post)
     -> 200 {"access_token": "<--token-prefix>-<n>", "token_type": "Bearer",
             "expires_in": <--lifetime-s>[, "scope": "..."]}
     -> 401 {"error": "invalid_client"} for an unknown client or a wrong secret
        (RFC 6749 §5.2), with WWW-Authenticate: Basic

   The schema registry's bearer listener (scripts/schema_registry.py --bearer-port)
   accepts tokens with that prefix (default oauth.flexrun-local).

2. Google credentials (application default credentials), so the same endpoint can be a
   service account key's `token_uri` or an authorized_user file's token endpoint:

     grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=<JWT>   (service account)
     grant_type=refresh_token&client_id=..&client_secret=..&refresh_token=..  (gcloud user)
     -> 200 {"access_token": "<--google-token-prefix>-<n>", "token_type": "Bearer", "expires_in": ...}

   These tokens (default prefix ya29.flexrun-local, stack.sh's GOOGLE_TOKEN_PREFIX)
   are what scripts/secret_manager.py, the registry's ADC listener and the broker's
   OAUTHBEARER validator accept. The assertion's shape and times are checked as
   Google's endpoint checks them (400 invalid_grant "Invalid JWT: Token must be a
   short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and
   exp values in the JWT claim."; a missing scope is 400 invalid_scope), but its
   signature is not: this endpoint does not know the service account's public key.
   Any refresh token is accepted.

Access tokens are opaque strings, not JWTs; Kafka's Java OAuth login (which Confluent's
Java client uses) would want a JWT, flexrun's client does not read the token.

Admin endpoints, loopback only (tests):
  GET  /_flexrun/stats[?client_id=ID] -> {"issued", "refused", "by_grant", "by_client",
       "scopes": [the last 100 scopes asked for]} (or that one client's count)
  POST /_flexrun/clients {"client_id", "client_secret", "lifetime_s": optional}
       another client, with its own token lifetime (tests that run in parallel each use
       their own client, and count their own tokens)
  POST /_flexrun/faults {"status": 503, "count": N, "client_id": optional}
       the next N token requests (of that client) answer that status

  python3 token_endpoint.py --port 8201 --client-id ID --client-secret S [--lifetime-s 3600]
"""
import argparse
import base64
import binascii
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib import parse

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
SHORT_LIVED = ("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. "
               "Check your iat and exp values in the JWT claim.")


def b64url_json(part):
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


class State:
    def __init__(self, a):
        self.lock = threading.Lock()
        self.prefix = a.token_prefix
        self.google_prefix = a.google_token_prefix
        self.lifetime_s = a.lifetime_s
        self.clients = {a.client_id: {"secret": a.client_secret, "lifetime_s": a.lifetime_s}}
        self.n = 0
        self.stats = {"issued": 0, "refused": 0, "by_grant": {}, "by_client": {}, "scopes": []}
        self.faults = {}  # client id ("" = any) -> [status, count]

    def issue(self, prefix, grant, client, lifetime_s, scope, echo_scope=True):
        with self.lock:
            self.n += 1
            st = self.stats
            st["issued"] += 1
            st["by_grant"][grant] = st["by_grant"].get(grant, 0) + 1
            if client:
                st["by_client"][client] = st["by_client"].get(client, 0) + 1
            if scope is not None:
                st["scopes"] = (st["scopes"] + [scope])[-100:]
            body = {"access_token": "%s-%d" % (prefix, self.n), "token_type": "Bearer", "expires_in": lifetime_s}
        if scope and echo_scope:
            body["scope"] = scope
        return 200, body

    def refuse(self, status, body):
        with self.lock:
            self.stats["refused"] += 1
        return status, body

    def fault(self, client):
        with self.lock:
            for key in (client or "", ""):
                f = self.faults.get(key)
                if f and f[1] > 0:
                    f[1] -= 1
                    return f[0]
        return 0


class Handler(BaseHTTPRequestHandler):
    state = None

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def loopback(self):
        return self.client_address[0].startswith("127.") or self.client_address[0] in ("::1", "::ffff:127.0.0.1")

    def do_GET(self):
        url = parse.urlsplit(self.path)
        if url.path != "/_flexrun/stats" or not self.loopback():
            return self.reply(404, {"error": "not_found"})
        s = self.state
        client = parse.parse_qs(url.query).get("client_id", [None])[0]
        with s.lock:
            if client is not None:
                return self.reply(200, {"client_id": client, "issued": s.stats["by_client"].get(client, 0)})
            return self.reply(200, json.loads(json.dumps(s.stats)))

    def do_POST(self):
        url = parse.urlsplit(self.path)
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n > 0 else b""
        if url.path.startswith("/_flexrun/"):
            if not self.loopback():
                return self.reply(403, {"error": "loopback only"})
            try:
                return self.reply(*self.admin(url.path, json.loads(raw or b"{}")))
            except (ValueError, KeyError, TypeError) as e:
                return self.reply(400, {"error": "bad admin request: %s" % e})
        if url.path != "/token":
            return self.reply(404, {"error": "not_found"})
        form = {k: v[0] for k, v in parse.parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True).items()}
        status, body = self.token(form)
        headers = [("WWW-Authenticate", 'Basic realm="flexrun"')] if status == 401 else []
        self.reply(status, body, headers)

    def admin(self, path, ask):
        s = self.state
        if path == "/_flexrun/clients":
            with s.lock:
                s.clients[str(ask["client_id"])] = {"secret": str(ask["client_secret"]),
                                                    "lifetime_s": int(ask.get("lifetime_s", s.lifetime_s))}
            return 200, {"ok": True}
        if path == "/_flexrun/faults":
            with s.lock:
                s.faults[str(ask.get("client_id", ""))] = [int(ask.get("status", 503)), int(ask.get("count", 1))]
            return 200, {"ok": True}
        return 404, {"error": "not_found"}

    def client_credentials(self, form):
        """(client id, secret, whether Basic was used) from the Authorization header or the form."""
        auth = self.headers.get("Authorization") or ""
        if auth.lower().startswith("basic "):
            try:
                ident, _, secret = base64.b64decode(auth[6:].strip()).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return None, None, True
            # RFC 6749 §2.3.1: the id and secret are form-urlencoded before Basic encoding.
            return parse.unquote_plus(ident), parse.unquote_plus(secret), True
        return form.get("client_id"), form.get("client_secret"), False

    def token(self, form):
        s = self.state
        grant = form.get("grant_type")
        if not grant:
            return s.refuse(400, {"error": "invalid_request", "error_description": "grant_type is missing"})
        scope = form.get("scope")
        if grant == "client_credentials":
            ident, secret, _ = self.client_credentials(form)
            injected = s.fault(ident)
            if injected:
                return s.refuse(injected, {"error": "temporarily_unavailable", "error_description": "injected by token_endpoint.py"})
            with s.lock:
                client = s.clients.get(ident or "")
            if not client or secret != client["secret"]:
                return s.refuse(401, {"error": "invalid_client"})
            return s.issue(s.prefix, grant, ident, client["lifetime_s"], scope)
        if grant == JWT_BEARER:
            injected = s.fault(None)
            if injected:
                return s.refuse(injected, {"error": "temporarily_unavailable", "error_description": "injected by token_endpoint.py"})
            parts = (form.get("assertion") or "").split(".")
            try:
                if len(parts) != 3:
                    raise ValueError
                header, claims = b64url_json(parts[0]), b64url_json(parts[1])
                iat, exp = int(claims["iat"]), int(claims["exp"])
                issuer = str(claims["iss"])
                claims["aud"]
            except (ValueError, KeyError, TypeError, binascii.Error):
                return s.refuse(400, {"error": "invalid_grant", "error_description": "Invalid JWT."})
            if header.get("alg") != "RS256":
                return s.refuse(400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
            now = time.time()
            if exp - iat > 3600 or exp < now or iat > now + 300:
                return s.refuse(400, {"error": "invalid_grant", "error_description": SHORT_LIVED})
            if not claims.get("scope"):
                return s.refuse(400, {"error": "invalid_scope",
                                      "error_description": "Invalid OAuth scope or ID token audience provided."})
            return s.issue(s.google_prefix, grant, issuer, min(s.lifetime_s, 3600), claims["scope"], False)
        if grant == "refresh_token":
            injected = s.fault(form.get("client_id"))
            if injected:
                return s.refuse(injected, {"error": "temporarily_unavailable", "error_description": "injected by token_endpoint.py"})
            if not form.get("refresh_token") or not form.get("client_id"):
                return s.refuse(400, {"error": "invalid_request", "error_description": "Missing required parameter: refresh_token"})
            return s.issue(s.google_prefix, grant, form["client_id"], min(s.lifetime_s, 3600), scope, False)
        return s.refuse(400, {"error": "unsupported_grant_type", "error_description": "Invalid grant_type: " + grant})


class Server(ThreadingHTTPServer):
    request_queue_size = 128
    daemon_threads = True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8201)
    ap.add_argument("--client-id", default="flexrun-oauth-client")
    ap.add_argument("--client-secret", default="flexrun-oauth-secret")
    ap.add_argument("--lifetime-s", type=int, default=3600, help="expires_in of the tokens issued (default %(default)s)")
    ap.add_argument("--token-prefix", default="oauth.flexrun-local",
                    help="prefix of client-credentials tokens (default %(default)s)")
    ap.add_argument("--google-token-prefix", default="ya29.flexrun-local",
                    help="prefix of tokens for Google credentials (default %(default)s)")
    a = ap.parse_args()
    Handler.state = State(a)
    srv = Server((a.host, a.port), Handler)
    print("token endpoint on http://%s:%d/token" % (a.host, a.port), file=sys.stderr, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
