"""Start gcp-storage-emulator (PyPI) for flexrun, with two changes made here rather
than in the package:

1. Requests are served on threads (http.server.ThreadingHTTPServer), and the
   emulator's storage is entered under one lock. The package serves one request at a
   time on a plain HTTPServer; its storage rewrites one metadata document per change,
   so handling stays serialized, but connections and the modelled latency below
   overlap, as they do against a real service.
2. In memory (the default here), the emulator's metadata document is not rewritten
   on every change: the package serializes every bucket's and object's metadata to
   one JSON document after each upload, copy or delete, which makes each call O(all
   objects) and a 5,000-file commit quadratic. The metadata stays in the emulator's
   own dictionaries, which is where it reads it from; the document only matters for
   reloading a data directory, which an in-memory store never does.
3. `--latency-ms N` (default 0) waits N ms before each request is handled, outside the
   lock. Cloud Storage is a remote service: each request costs a network round trip
   and the service's own time, which a client can overlap by issuing requests in
   parallel; an in-process emulator costs neither. The seed-002 benchmark
   (scripts/bench-commit.sh) states the latency it models; tests run with 0.

4. Fault injection for tests, on loopback only: `POST /_flexrun/faults` with
   `{"status": 503, "count": 3, "scope": "run_7/"}` makes the next 3 requests whose
   decoded path and query, or an upload's metadata, contain the scope (an object
   prefix) answer that status
   with a JSON API error body, before the emulator sees them;
   `GET /_flexrun/faults?scope=run_7/` reports how many were served and when
   (`served_at_ms`, the launcher's monotonic clock), so tests check retry counts and
   backoff gaps on the service's side. Scoped faults let
   tests that run in parallel each fault only their own objects. flexrun's store retries what Google's retry strategy calls
   transient (https://cloud.google.com/storage/docs/retry-strategy: "HTTP 408, 429,
   and 5xx response codes"), and the tests check it against these answers.

Usage: python gcs_emulator_launcher.py --port P --bucket B [--latency-ms N]
"""

import argparse
import io
import json
import logging
import threading
import time
from functools import partial
from http import server as http_server
from urllib import parse

import gcp_storage_emulator.server as emu

LOCK = threading.Lock()
LATENCY_S = 0.0
# Injected faults, one set per scope: a scope is a text that a request's decoded path
# and query must contain (an object prefix, say), so tests that run in parallel each
# fault only their own objects. The empty scope matches every request.
FAULTS = {}

_handle = emu.Router.handle


def _reply(h, status, obj):
    body = json.dumps(obj).encode("utf-8")
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def _body(h):
    n = int(h.headers.get("Content-Length") or 0)
    return h.rfile.read(n) if n > 0 else b""


def _fault_for(path):
    """The status to answer `path` with (and count it served), or 0. Call under LOCK."""
    for scope, f in FAULTS.items():
        if f["count"] > 0 and scope in path:
            f["count"] -= 1
            f["served"] += 1
            f["served_at_ms"].append(round(time.monotonic() * 1000.0, 1))
            return f["status"]
    return 0


def _faults_endpoint(h, method):
    query = parse.parse_qs(parse.urlsplit(h.path).query)
    raw = _body(h)
    with LOCK:
        if method == "POST":
            ask = json.loads(raw or b"{}")
            scope = str(ask.get("scope", ""))
            FAULTS[scope] = {"status": int(ask.get("status", 0)), "count": int(ask.get("count", 0)), "served": 0, "served_at_ms": []}
        else:
            scope = query.get("scope", [""])[0]
        state = dict(FAULTS.get(scope, {"status": 0, "count": 0, "served": 0, "served_at_ms": []}), scope=scope)
    return _reply(h, 200, state)


def handle(self, method):
    h = self._request_handler
    if h.path.startswith("/_flexrun/faults"):
        return _faults_endpoint(h, method)
    if LATENCY_S > 0:
        time.sleep(LATENCY_S)
    where = parse.unquote(h.path)
    if method in ("POST", "PUT") and any(scope and f["count"] > 0 for scope, f in FAULTS.items()):
        # A multipart upload names its object in the body's metadata, not in the path:
        # read the body once, look there too, and hand the emulator a copy.
        body = _body(h)
        h.rfile = io.BytesIO(body)
        where += " " + body[:4096].decode("utf-8", "replace")
    with LOCK:
        status = _fault_for(where)
        if not status:
            return _handle(self, method)
    _body(h)
    return _reply(h, status, {"error": {"code": status, "message": "injected by gcs_emulator_launcher.py", "errors": []}})


emu.Router.handle = handle


class ThreadingServer(http_server.ThreadingHTTPServer):
    # listen(2)'s backlog: the default of 5 drops connection attempts when a client
    # opens many at once, and each dropped SYN costs a 1 s retransmission.
    request_queue_size = 512
    daemon_threads = True


class ThreadedAPI(emu.APIThread):
    def run(self):
        httpd = ThreadingServer((self._host, self._port), partial(emu.RequestHandler, self._storage))
        self._httpd = httpd
        self.is_running.set()
        httpd.serve_forever()


emu.APIThread = ThreadedAPI


def main():
    global LATENCY_S
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bucket", action="append", default=[])
    ap.add_argument("--latency-ms", type=float, default=0.0)
    ap.add_argument("--data-dir", default=None, help="persist here (default: in memory)")
    a = ap.parse_args()
    LATENCY_S = a.latency_ms / 1000.0
    logging.basicConfig(level=logging.WARNING)
    if a.data_dir is None:
        import gcp_storage_emulator.storage as st

        st.Storage._write_config_to_file = lambda self: None
    srv = emu.Server(a.host, a.port, in_memory=a.data_dir is None, data_dir=a.data_dir)
    from gcp_storage_emulator.handlers import buckets

    for b in a.bucket:
        buckets.create_bucket(b, srv._storage)
    srv.run()


if __name__ == "__main__":
    main()
