#!/usr/bin/env python3
"""A small Confluent-compatible Schema Registry for the local stack.

No Confluent-compatible registry can be installed from the package registries this
project may use (Confluent's is on Maven/Docker only, Karapace is not on PyPI), so the
stack runs this one. It serves the REST subset that Kafka Avro serializers and
flexrun use, with Confluent's documented answers and error codes
(docs.confluent.io/platform/current/schema-registry/develop/api.html):

  POST /subjects/{subject}/versions        {"schema": "...", "schemaType": T,
                                            "references": [{"name", "subject", "version"}]}
       -> {"id": N} (the same schema text and references get the same id, in any
       subject; T is AVRO, the default, or PROTOBUF, whose .proto text is kept as it is;
       a reference names the import path of another registered schema, as Confluent's
       "Schema references" page describes; one to an unknown subject or version: 422
       error_code 42201)
  GET  /schemas/ids/{id}                   -> {"schema": "...", "schemaType": T (not AVRO),
       "references": [...] (when it has any)}; 404 error_code 40403
  GET  /subjects                           -> ["subject", ...]
  GET  /subjects/{subject}/versions        -> [1, 2, ...]; 404 error_code 40401
  GET  /subjects/{subject}/versions/{v}    -> {"subject","version","id","schema"};
       v may be "latest"; 404 error_code 40401 (subject) or 40402 (version)

Tests can make it fail (loopback only): POST /faults {"id": N, "status": 503, "count": C}
answers the next C requests for schema id N with that status (Confluent's 50001 body);
such a fault is scoped to one id, so tests running in parallel do not meet each other's.

Query strings are ignored (clients add ?fetchMaxId=false or ?deleted=true). Schemas are
compared by their JSON text after parsing and re-serialising compactly, not by Avro
canonical form, and compatibility rules are not enforced: the README says so.
State lives in memory, and in --state FILE when given (loaded at start, saved on change).

Authentication, as Google's Kafka templates use it (schemaRegistryAuthenticationMode,
docs/research/google-commands.md §3): --port is always plain HTTP without
authentication (NONE). Optional extra listeners serve the same registry state:

  --tls-port P --tls-cert C --tls-key K --tls-ca CA   (TLS) HTTPS that requires a client
       certificate signed by CA (mutual TLS); a connection without one, or with one CA
       did not sign, fails in the handshake.
  --bearer-port P [--bearer-prefix oauth.flexrun-local]   (OAUTH) every request must carry
       `Authorization: Bearer <token>` with a token that starts with the prefix (the
       client-credentials tokens of scripts/token_endpoint.py); otherwise 401 with the
       body Confluent's registries answer, {"error_code": 401, "message": "Unauthorized"}
       (quoted in mostafa/xk6-kafka#375 and event-catalog/generators#194; Confluent's
       Java client reports it as "Unauthorized; error code: 401",
       confluentinc/schema-registry#3244).
  --adc-port P [--adc-prefix ya29.flexrun-local]   (APPLICATION_DEFAULT_CREDENTIALS) Google's
       managed registry: a Google access token (the tokens token_endpoint.py issues for
       Google credentials) as a bearer token, or 401 in Google's error envelope
       (UNAUTHENTICATED). Paths may carry Google's base path
       /v1/projects/P/locations/L/schemaRegistries/R before the Confluent path.

Tokens are checked by prefix only; nothing is asked over the network.

  python3 schema_registry.py --port 8081 [--state registry.json] [--tls-port ...]
"""
import argparse
import json
import re
import socket
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class Registry:
    def __init__(self, state_path=None):
        self.lock = threading.Lock()
        self.state_path = state_path
        self.schemas = {}  # id -> schema text
        self.subjects = {}  # subject -> [id per version]
        if state_path:
            try:
                with open(state_path) as f:
                    s = json.load(f)
                self.schemas = {int(k): (v + [[]])[:3] for k, v in s["schemas"].items()}
                self.subjects = s["subjects"]
            except FileNotFoundError:
                pass

    def save(self):
        if self.state_path:
            with open(self.state_path, "w") as f:
                json.dump({"schemas": self.schemas, "subjects": self.subjects}, f)

    def register(self, subject, schema, schema_type="AVRO", references=None):
        if schema_type == "AVRO":
            key = json.dumps(json.loads(schema), separators=(",", ":"), sort_keys=True)
        else:
            key = schema_type + ":" + schema
        refs = [{"name": r["name"], "subject": r["subject"], "version": int(r["version"])} for r in references or []]
        if refs:
            key += "|refs:" + json.dumps(refs, sort_keys=True)
        with self.lock:
            for ref in refs:
                versions = self.subjects.get(ref["subject"])
                if not versions or not 1 <= ref["version"] <= len(versions):
                    return None
            found = [i for i, s in self.schemas.items() if s[1] == key]
            sid = found[0] if found else max(self.schemas, default=0) + 1
            if not found:
                self.schemas[sid] = (schema, key, refs)
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
            self.save()
            return sid


def error(status, code, message):
    return status, {"error_code": code, "message": message}


def described(s, extra):
    """The answer for stored schema `s` (text, key, references) with `extra` fields."""
    body = dict(extra, schema=s[0])
    if s[1].startswith("PROTOBUF:"):
        body["schemaType"] = "PROTOBUF"
    if s[2]:
        body["references"] = s[2]
    return body


class Handler(BaseHTTPRequestHandler):
    registry = None
    faults = {}  # schema id -> [status, count]
    faults_lock = threading.Lock()

    def fault(self, sid):
        with self.faults_lock:
            f = self.faults.get(sid)
            if not f or f[1] <= 0:
                return None
            f[1] -= 1
            return error(f[0], 50001, "injected fault from the flexrun test registry")

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def parts(self):
        return [p for p in self.path.split("?", 1)[0].split("/") if p]

    def do_GET(self):
        self.reply(*self.get(self.parts()))

    def get(self, p):
        r = self.registry
        with r.lock:
            if len(p) == 3 and p[:2] == ["schemas", "ids"] and p[2].isdigit():
                injected = self.fault(int(p[2]))
                if injected:
                    return injected
                s = r.schemas.get(int(p[2]))
                if not s:
                    return error(404, 40403, "Schema not found")
                return 200, described(s, {})
            if p == ["subjects"]:
                return 200, sorted(r.subjects)
            if len(p) >= 3 and p[0] == "subjects" and p[2] == "versions":
                versions = r.subjects.get(p[1])
                if versions is None:
                    return error(404, 40401, "Subject '%s' not found." % p[1])
                if len(p) == 3:
                    return 200, list(range(1, len(versions) + 1))
                if len(p) == 4:
                    v = len(versions) if p[3] in ("latest", "-1") else int(p[3]) if p[3].isdigit() else 0
                    if not 1 <= v <= len(versions):
                        return error(404, 40402, "Version %s not found." % p[3])
                    sid = versions[v - 1]
                    return 200, described(r.schemas[sid], {"subject": p[1], "version": v, "id": sid})
        return error(404, 404, "HTTP 404 Not Found")

    def do_POST(self):
        p = self.parts()
        n = int(self.headers.get("Content-Length") or 0)
        if p == ["faults"]:
            body = json.loads(self.rfile.read(n) or b"{}")
            with self.faults_lock:
                self.faults[int(body["id"])] = [int(body.get("status", 503)), int(body.get("count", 1))]
            return self.reply(200, {"ok": True})
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
            schema = body["schema"]
            references = body.get("references") or []
            schema_type = body.get("schemaType", "AVRO")
            if schema_type not in ("AVRO", "PROTOBUF"):
                return self.reply(*error(422, 42201, "Invalid schema type " + str(schema_type)))
            if schema_type == "AVRO":
                json.loads(schema)
        except (ValueError, KeyError, TypeError):
            return self.reply(*error(422, 42201, "Invalid schema"))
        if len(p) == 3 and p[0] == "subjects" and p[2] == "versions":
            try:
                sid = self.registry.register(p[1], schema, schema_type, references)
            except (KeyError, TypeError, ValueError):
                return self.reply(*error(422, 42201, "Invalid schema references"))
            if sid is None:
                return self.reply(*error(422, 42201, "Invalid schema: a reference names an unknown subject or version"))
            return self.reply(200, {"id": sid})
        self.reply(*error(404, 404, "HTTP 404 Not Found"))


GOOGLE_MISSING = ("Request is missing required authentication credential. Expected OAuth 2 access token, login "
                  "cookie or other valid authentication credential. See "
                  "https://developers.google.com/identity/sign-in/web/devconsole-project.")
GOOGLE_INVALID = ("Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie "
                  "or other valid authentication credential. See "
                  "https://developers.google.com/identity/sign-in/web/devconsole-project.")
# Google's managed registry: https://managedkafka.googleapis.com/v1/projects/P/locations/L/schemaRegistries/R
GOOGLE_BASE = re.compile(r"^/v1/projects/[^/]+/locations/[^/]+/schemaRegistries/[^/]+(?=/|$)")


class BearerHandler(Handler):
    """Every request must carry a bearer token with one of `prefixes` (OAUTH mode)."""

    prefixes = ()

    def token_error(self):
        """None when the request's bearer token is accepted, else the 401 answer."""
        auth = self.headers.get("Authorization") or ""
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if token and token.startswith(self.prefixes):
            return None
        return self.unauthorized(bool(token))

    def unauthorized(self, had_token):
        return error(401, 401, "Unauthorized")

    def do_GET(self):
        refused = self.token_error()
        if refused:
            return self.reply(*refused)
        Handler.do_GET(self)

    def do_POST(self):
        refused = self.token_error()
        if refused:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            return self.reply(*refused)
        Handler.do_POST(self)


class AdcHandler(BearerHandler):
    """APPLICATION_DEFAULT_CREDENTIALS: a Google access token, Google's 401, Google's base path."""

    def unauthorized(self, had_token):
        message = GOOGLE_INVALID if had_token else GOOGLE_MISSING
        return 401, {"error": {"code": 401, "message": message, "status": "UNAUTHENTICATED"}}

    def reply(self, status, body):
        if status == 401 and "error" in body:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return self.wfile.write(data)
        return Handler.reply(self, status, body)

    def parts(self):
        path = self.path.split("?", 1)[0]
        return [p for p in GOOGLE_BASE.sub("", path, count=1).split("/") if p]


class Server(ThreadingHTTPServer):
    daemon_threads = True


class TlsServer(Server):
    """HTTPS with a required client certificate. The handshake runs on the request's own
    thread, so a client that connects and sends nothing does not hold up the others."""

    context = None

    def finish_request(self, request, client_address):
        request.settimeout(30)
        try:
            conn = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            # A bare connect and close (stack.sh's readiness probe) is not worth a line.
            if not isinstance(e, (ssl.SSLEOFError, ConnectionResetError)):
                print("tls: refused %s: %s" % (client_address[0], e), file=sys.stderr, flush=True)
            return
        try:
            Server.finish_request(self, conn, client_address)
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def shutdown_request(self, request):
        try:
            request.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        request.close()


def serve(server):
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--state")
    ap.add_argument("--tls-port", type=int, help="mutual-TLS listener (needs --tls-cert, --tls-key, --tls-ca)")
    ap.add_argument("--tls-cert", help="the server's certificate (PEM)")
    ap.add_argument("--tls-key", help="the server's private key (PEM, unencrypted)")
    ap.add_argument("--tls-ca", help="the CA that must have signed a client's certificate (PEM)")
    ap.add_argument("--bearer-port", type=int, help="OAuth bearer-token listener")
    ap.add_argument("--bearer-prefix", action="append", help="accepted token prefix (default oauth.flexrun-local)")
    ap.add_argument("--adc-port", type=int, help="Google access-token (ADC) listener")
    ap.add_argument("--adc-prefix", action="append", help="accepted token prefix (default ya29.flexrun-local)")
    a = ap.parse_args()
    Handler.registry = Registry(a.state)
    extra = []
    if a.tls_port:
        if not (a.tls_cert and a.tls_key and a.tls_ca):
            ap.error("--tls-port needs --tls-cert, --tls-key and --tls-ca")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
        ctx.load_verify_locations(cafile=a.tls_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
        TlsServer.context = ctx
        extra.append(TlsServer((a.host, a.tls_port), Handler))
    if a.bearer_port:
        handler = type("OauthHandler", (BearerHandler,), {"prefixes": tuple(a.bearer_prefix or ["oauth.flexrun-local"])})
        extra.append(Server((a.host, a.bearer_port), handler))
    if a.adc_port:
        handler = type("GoogleHandler", (AdcHandler,), {"prefixes": tuple(a.adc_prefix or ["ya29.flexrun-local"])})
        extra.append(Server((a.host, a.adc_port), handler))
    for server in extra:
        serve(server)
    ThreadingHTTPServer((a.host, a.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
