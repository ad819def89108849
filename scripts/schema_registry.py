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

  python3 schema_registry.py --port 8081 [--state registry.json]
"""
import argparse
import json
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--state")
    a = ap.parse_args()
    Handler.registry = Registry(a.state)
    ThreadingHTTPServer((a.host, a.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
