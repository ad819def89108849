#!/usr/bin/env python3
"""A small Confluent-compatible Schema Registry for the local stack.

No Confluent-compatible registry can be installed from the package registries this
project may use (Confluent's is on Maven/Docker only, Karapace is not on PyPI), so the
stack runs this one. It serves the REST subset that Kafka Avro serializers and
flexrun use, with Confluent's documented answers and error codes
(docs.confluent.io/platform/current/schema-registry/develop/api.html):

  POST /subjects/{subject}/versions        {"schema": "...", "schemaType": T} -> {"id": N}
       (the same schema text gets the same id, in any subject; T is AVRO, the default,
       or PROTOBUF, whose .proto text is kept as it is)
  GET  /schemas/ids/{id}                   -> {"schema": "...", "schemaType": T (not AVRO)};
       404 error_code 40403
  GET  /subjects                           -> ["subject", ...]
  GET  /subjects/{subject}/versions        -> [1, 2, ...]; 404 error_code 40401
  GET  /subjects/{subject}/versions/{v}    -> {"subject","version","id","schema"};
       v may be "latest"; 404 error_code 40401 (subject) or 40402 (version)

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
                self.schemas = {int(k): v for k, v in s["schemas"].items()}
                self.subjects = s["subjects"]
            except FileNotFoundError:
                pass

    def save(self):
        if self.state_path:
            with open(self.state_path, "w") as f:
                json.dump({"schemas": self.schemas, "subjects": self.subjects}, f)

    def register(self, subject, schema, schema_type="AVRO"):
        if schema_type == "AVRO":
            key = json.dumps(json.loads(schema), separators=(",", ":"), sort_keys=True)
        else:
            key = schema_type + ":" + schema
        with self.lock:
            found = [i for i, s in self.schemas.items() if s[1] == key]
            sid = found[0] if found else max(self.schemas, default=0) + 1
            if not found:
                self.schemas[sid] = (schema, key)
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
            self.save()
            return sid


def error(status, code, message):
    return status, {"error_code": code, "message": message}


class Handler(BaseHTTPRequestHandler):
    registry = None

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
                s = r.schemas.get(int(p[2]))
                if not s:
                    return error(404, 40403, "Schema not found")
                body = {"schema": s[0]}
                if s[1].startswith("PROTOBUF:"):
                    body["schemaType"] = "PROTOBUF"
                return 200, body
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
                    return 200, {"subject": p[1], "version": v, "id": sid, "schema": r.schemas[sid][0]}
        return error(404, 404, "HTTP 404 Not Found")

    def do_POST(self):
        p = self.parts()
        n = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
            schema = body["schema"]
            schema_type = body.get("schemaType", "AVRO")
            if schema_type not in ("AVRO", "PROTOBUF"):
                return self.reply(*error(422, 42201, "Invalid schema type " + str(schema_type)))
            if schema_type == "AVRO":
                json.loads(schema)
        except (ValueError, KeyError, TypeError):
            return self.reply(*error(422, 42201, "Invalid schema"))
        if len(p) == 3 and p[0] == "subjects" and p[2] == "versions":
            return self.reply(200, {"id": self.registry.register(p[1], schema, schema_type)})
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
