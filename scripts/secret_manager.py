#!/usr/bin/env python3
"""A small Google Secret Manager (v1 REST) stand-in for the local stack.

Google's Kafka templates read passwords and client secrets from Secret Manager
(`projects/P/secrets/S/versions/V`, docs/research/google-commands.md §1, §8); no
Secret Manager emulator can be installed from the package registries, so the stack
runs this one (stdlib Python). It serves the one call those parameters need, as
Google's reference page describes it
(https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access):

  GET /v1/projects/{p}/secrets/{s}/versions/{v}:access
  GET /v1/projects/{p}/locations/{l}/secrets/{s}/versions/{v}:access
      -> 200 {"name": "projects/<number>/secrets/S/versions/N",
              "payload": {"data": "<base64>", "dataCrc32c": "<decimal int64>"}}

- {p} is a project id or number; the answer names the project by its number, as
  Google's answers do. A project's number comes from the state file's
  "project_numbers", else a fixed 12-digit number derived from the id (sha256).
- {v} is a version number or `latest`, "an alias to the most recently created
  SecretVersion" (Google's words): the newest version whatever its state, so a
  disabled newest version fails, as it does on Google (it does not fall back to an
  older enabled one). The answer's name carries the resolved number.
- dataCrc32c is CRC32C (Castagnoli) of the decoded bytes, "encoded as a decimal
  integer" (https://docs.cloud.google.com/secret-manager/docs/data-integrity).

Authentication: every request must carry `Authorization: Bearer <token>` whose token
starts with --token-prefix (default ya29.flexrun-local, stack.sh's
GOOGLE_TOKEN_PREFIX, the prefix of the access tokens scripts/token_endpoint.py issues
for Google credentials). Nothing is asked over the network. A missing credential or
one without the prefix is answered as Google answers it: 401 UNAUTHENTICATED.

Errors use Google's envelope {"error": {"code", "message", "status"}}, with the texts
Google's service gives (research note §8):
  401 UNAUTHENTICATED      no token / a token without the prefix
  403 PERMISSION_DENIED    only when injected (faults below); Google answers it when
                           the caller lacks secretmanager.versions.access
  404 NOT_FOUND            "Secret [projects/N/secrets/S] not found or has no versions."
                           "Secret Version [projects/N/secrets/S/versions/V] not found."
  400 FAILED_PRECONDITION  "Secret Version [...] is in DISABLED state." (or DESTROYED)
  400 INVALID_ARGUMENT     "Resource ID [...] is not in a valid format."

Secrets come from --state FILE (loaded at start, saved on change):
  {"project_numbers": {"flexrun-local": "123456789012"},
   "secrets": {"projects/P/secrets/S": [{"data_b64": "...", "state": "ENABLED"}, ...]}}
(a version may give "data", UTF-8 text, instead of "data_b64"; version N is the Nth).

Admin endpoints, loopback only (tests):
  POST /_flexrun/secrets {"name": "projects/P/secrets/S", "data": "text" | "data_b64": "...",
        "location": optional, "state": optional (ENABLED)}
        -> {"name": "projects/<number>/[locations/L/]secrets/S/versions/N", "version": N,
            "dataCrc32c": "..."}: a new version, as AddSecretVersion makes one (at most 64 KiB).
  POST /_flexrun/state {"name": "<version name>", "state": "ENABLED"|"DISABLED"|"DESTROYED"}
        (DESTROYED discards the data, as Google does)
  GET  /_flexrun/secrets -> every secret, its versions and their states (no data)
  POST /_flexrun/faults {"name": "<name prefix>", "corrupt_crc": true, "count": 1}
        the next `count` successful answers for names starting with the prefix carry a
        wrong dataCrc32c; {"name": ..., "status": 503, "count": N} answers the next N
        requests with that status in Google's envelope (503 UNAVAILABLE, 429
        RESOURCE_EXHAUSTED, 500 INTERNAL, 403 PERMISSION_DENIED, ...). The prefix is
        matched against the requested name as given and with the project's number.
  GET  /_flexrun/faults?name=PREFIX -> what is left of that fault and how often it fired
  GET  /_flexrun/stats -> {"requests", "served": {"<version name>": n}, "refused": {"<code>": n}}

Not emulated: gRPC (Google's Java client speaks gRPC; this is REST only), every other
method (create, list, IAM, replication, expiry, rotation), real IAM (everyone with a
token may read everything), and the regional endpoint host
(secretmanager.LOCATION.rep.googleapis.com): global and regional names are served on
one port.

  python3 secret_manager.py --port 8200 [--state secrets.json] [--token-prefix P]
"""
import argparse
import base64
import hashlib
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib import parse


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data):
    """CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as google-crc32c computes it."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the standard check value

# Google's secret ids: "[a-zA-Z_0-9-]", at most 255 characters.
ID = r"[A-Za-z0-9_-]{1,255}"
PROJECT = r"[A-Za-z0-9.:_-]{1,100}"
SECRET_NAME = re.compile(r"^projects/(%s)/(?:locations/(%s)/)?secrets/(%s)$" % (PROJECT, ID, ID))
VERSION_NAME = re.compile(r"^projects/(%s)/(?:locations/(%s)/)?secrets/(%s)/versions/([^/]+)$" % (PROJECT, ID, ID))
STATES = ("ENABLED", "DISABLED", "DESTROYED")
MAX_DATA = 65536  # "Must be no larger than 64KiB."

STATUS_NAMES = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL", 501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}
MISSING_CREDENTIAL = ("Request is missing required authentication credential. Expected OAuth 2 access token, login "
                      "cookie or other valid authentication credential. See "
                      "https://developers.google.com/identity/sign-in/web/devconsole-project.")
INVALID_CREDENTIAL = ("Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie "
                      "or other valid authentication credential. See "
                      "https://developers.google.com/identity/sign-in/web/devconsole-project.")


def google_error(code, message, status=None):
    return code, {"error": {"code": code, "message": message, "status": status or STATUS_NAMES.get(code, "UNKNOWN")}}


class Store:
    def __init__(self, path=None):
        self.lock = threading.Lock()
        self.path = path
        self.numbers = {}  # project id -> project number (text)
        self.secrets = {}  # "projects/<number>/[locations/L/]secrets/S" -> [{"data": bytes|None, "state": S}]
        if path:
            try:
                with open(path) as f:
                    s = json.load(f)
            except FileNotFoundError:
                s = {}
            self.numbers = {k: str(v) for k, v in (s.get("project_numbers") or {}).items()}
            for name, versions in (s.get("secrets") or {}).items():
                m = SECRET_NAME.match(name)
                if not m:
                    raise SystemExit("state file: %r is not a secret name (projects/P/secrets/S)" % name)
                key = self.secret_key(*m.groups())
                self.secrets[key] = [self._version(v) for v in versions]

    @staticmethod
    def _version(v):
        state = v.get("state", "ENABLED")
        if state not in STATES:
            raise ValueError("state must be one of %s" % ", ".join(STATES))
        data = base64.b64decode(v["data_b64"]) if "data_b64" in v else v.get("data", "").encode("utf-8")
        return {"data": None if state == "DESTROYED" else data, "state": state}

    def number(self, project):
        if project.isdigit():
            return project
        if project not in self.numbers:
            digest = int(hashlib.sha256(project.encode()).hexdigest(), 16)
            return str(10 ** 11 + digest % (9 * 10 ** 11))
        return self.numbers[project]

    def secret_key(self, project, location, secret):
        where = "locations/%s/" % location if location else ""
        return "projects/%s/%ssecrets/%s" % (self.number(project), where, secret)

    def save(self):
        if not self.path:
            return
        secrets = {
            k: [{"data_b64": base64.b64encode(v["data"] or b"").decode(), "state": v["state"]} for v in vs]
            for k, vs in self.secrets.items()
        }
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"project_numbers": self.numbers, "secrets": secrets}, f)
        os.replace(tmp, self.path)


class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_prefix = {}

    def set(self, ask):
        prefix = str(ask.get("name", ""))
        with self.lock:
            self.by_prefix[prefix] = {
                "status": int(ask.get("status", 0)), "corrupt_crc": bool(ask.get("corrupt_crc", False)),
                "count": int(ask.get("count", 1)), "served": 0, "served_at_ms": [],
            }
            return dict(self.by_prefix[prefix], name=prefix)

    def get(self, prefix):
        with self.lock:
            f = self.by_prefix.get(prefix, {"status": 0, "corrupt_crc": False, "count": 0, "served": 0, "served_at_ms": []})
            return dict(f, name=prefix)

    def take(self, names, kind):
        """The fault of `kind` ("status" or "corrupt_crc") that matches one of `names`, counted as served."""
        with self.lock:
            for prefix, f in self.by_prefix.items():
                if f["count"] > 0 and f[kind] and any(n.startswith(prefix) for n in names):
                    f["count"] -= 1
                    f["served"] += 1
                    f["served_at_ms"].append(round(time.monotonic() * 1000.0, 1))
                    return dict(f)
        return None


class Handler(BaseHTTPRequestHandler):
    store = None
    faults = None
    token_prefix = "ya29.flexrun-local"
    stats = {"requests": 0, "served": {}, "refused": {}}
    stats_lock = threading.Lock()

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def loopback(self):
        return self.client_address[0].startswith("127.") or self.client_address[0] in ("::1", "::ffff:127.0.0.1")

    def count(self, status, name=None):
        with self.stats_lock:
            self.stats["requests"] += 1
            if status == 200:
                self.stats["served"][name] = self.stats["served"].get(name, 0) + 1
            else:
                key = str(status)
                self.stats["refused"][key] = self.stats["refused"].get(key, 0) + 1

    def do_GET(self):
        url = parse.urlsplit(self.path)
        path = parse.unquote(url.path)
        if path.startswith("/_flexrun/"):
            if not self.loopback():
                return self.reply(*google_error(403, "admin endpoints answer loopback clients only"))
            return self.reply(*self.admin_get(path, parse.parse_qs(url.query)))
        status, body = self.access(path)
        self.count(status, body.get("name"))
        self.reply(status, body)

    def do_POST(self):
        url = parse.urlsplit(self.path)
        path = parse.unquote(url.path)
        raw = self.body()
        if not path.startswith("/_flexrun/"):
            return self.reply(*google_error(404, "Method not found."))
        if not self.loopback():
            return self.reply(*google_error(403, "admin endpoints answer loopback clients only"))
        try:
            ask = json.loads(raw or b"{}")
            return self.reply(*self.admin_post(path, ask))
        except (ValueError, KeyError, TypeError) as e:
            return self.reply(*google_error(400, "bad admin request: %s" % e))

    def access(self, path):
        m = re.match(r"^/v1/(.+):access$", path)
        if not m:
            return google_error(404, "Method not found.")
        auth = self.headers.get("Authorization") or ""
        if not auth.lower().startswith("bearer ") or not auth[7:].strip():
            return google_error(401, MISSING_CREDENTIAL)
        if not auth[7:].strip().startswith(self.token_prefix):
            return google_error(401, INVALID_CREDENTIAL)
        name = m.group(1)
        s = self.store
        v = VERSION_NAME.match(name)
        names = [name]
        if v:
            project, location, secret, version = v.groups()
            key = s.secret_key(project, location, secret)
            names.append(key + "/versions/" + version)
        injected = self.faults.take(names, "status")
        if injected:
            code = injected["status"]
            if code == 403:
                return google_error(403, "Permission 'secretmanager.versions.access' denied for resource '%s' "
                                         "(or it may not exist)." % name)
            return google_error(code, "injected by scripts/secret_manager.py")
        if not v or not (version == "latest" or (version.isdigit() and int(version) > 0)):
            shown = names[-1] if v else name
            return google_error(400, "Resource ID [%s] is not in a valid format." % shown)
        with s.lock:
            versions = s.secrets.get(key)
            if not versions:
                return google_error(404, "Secret [%s] not found or has no versions." % key)
            n = len(versions) if version == "latest" else int(version)
            full = "%s/versions/%d" % (key, n)
            if n > len(versions):
                return google_error(404, "Secret Version [%s] not found." % full)
            got = versions[n - 1]
            if got["state"] != "ENABLED":
                return google_error(400, "Secret Version [%s] is in %s state." % (full, got["state"]), "FAILED_PRECONDITION")
            data = got["data"]
        crc = crc32c(data)
        if self.faults.take(names + [full], "corrupt_crc"):
            crc ^= 0x1
        return 200, {"name": full, "payload": {"data": base64.b64encode(data).decode(), "dataCrc32c": str(crc)}}

    def admin_get(self, path, query):
        if path == "/_flexrun/faults":
            return 200, self.faults.get(query.get("name", [""])[0])
        if path == "/_flexrun/stats":
            with self.stats_lock:
                return 200, json.loads(json.dumps(self.stats))
        if path == "/_flexrun/secrets":
            with self.store.lock:
                return 200, {
                    "project_numbers": self.store.numbers,
                    "secrets": {k: [{"version": i + 1, "state": v["state"]} for i, v in enumerate(vs)]
                                for k, vs in self.store.secrets.items()},
                }
        return google_error(404, "no such admin endpoint")

    def admin_post(self, path, ask):
        s = self.store
        if path == "/_flexrun/faults":
            return 200, self.faults.set(ask)
        if path == "/_flexrun/secrets":
            m = SECRET_NAME.match(str(ask["name"]))
            if not m:
                return google_error(400, "Resource ID [%s] is not in a valid format." % ask["name"])
            project, location, secret = m.groups()
            if ask.get("location"):
                if location and location != ask["location"]:
                    return google_error(400, "the name's location is not %s" % ask["location"])
                location = ask["location"]
            version = Store._version(ask)
            if version["data"] is not None and len(version["data"]) > MAX_DATA:
                return google_error(400, "the payload is larger than 64 KiB (Google: \"Must be no larger than 64KiB.\")")
            key = s.secret_key(project, location, secret)
            with s.lock:
                versions = s.secrets.setdefault(key, [])
                versions.append(version)
                n = len(versions)
                s.save()
            return 200, {"name": "%s/versions/%d" % (key, n), "version": n,
                         "dataCrc32c": str(crc32c(version["data"] or b""))}
        if path == "/_flexrun/state":
            v = VERSION_NAME.match(str(ask["name"]))
            state = ask.get("state")
            if not v or not v.group(4).isdigit() or state not in STATES:
                return google_error(400, "want a version name projects/P/secrets/S/versions/N and a state in %s" % (STATES,))
            key = s.secret_key(*v.groups()[:3])
            with s.lock:
                versions = s.secrets.get(key) or []
                n = int(v.group(4))
                if not 1 <= n <= len(versions):
                    return google_error(404, "Secret Version [%s/versions/%d] not found." % (key, n))
                if versions[n - 1]["state"] == "DESTROYED" and state != "DESTROYED":
                    return google_error(400, "Secret Version [%s/versions/%d] is in DESTROYED state." % (key, n),
                                        "FAILED_PRECONDITION")
                versions[n - 1]["state"] = state
                if state == "DESTROYED":
                    versions[n - 1]["data"] = None
                s.save()
            return 200, {"name": "%s/versions/%d" % (key, n), "state": state}
        return google_error(404, "no such admin endpoint")


class Server(ThreadingHTTPServer):
    request_queue_size = 128
    daemon_threads = True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8200)
    ap.add_argument("--state", help="JSON state file (loaded at start, saved on change)")
    ap.add_argument("--token-prefix", default="ya29.flexrun-local",
                    help="accept bearer tokens that start with this (default: %(default)s)")
    a = ap.parse_args()
    Handler.store = Store(a.state)
    Handler.faults = Faults()
    Handler.token_prefix = a.token_prefix
    srv = Server((a.host, a.port), Handler)
    print("secret manager on http://%s:%d (tokens starting %s)" % (a.host, a.port, a.token_prefix), file=sys.stderr, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
