"""Start bqemulator 1.4.0 with three fixes flexrun relies on, then run its CLI.

1. Time-travel snapshots off. Stock bqemulator copies the whole table on every
   committed append and keeps the copies, so appends get slower as the table grows
   (19.6k -> 4.0k rows/s over 100k rows, 5.6 GiB). flexrun never uses time travel:
   `SnapshotManager.record_change` only publishes the change event here.
2. RECORD columns over Storage Write. The gRPC write path builds the target Arrow
   schema from each field's name/type/mode only, dropping nested `fields`, so any
   RECORD column becomes an empty struct and every append to such a table fails
   ("Attempted to convert a STRUCT with no fields"). Google's dead-letter table has
   one (`attributes`). The patched builder keeps the nested fields.
3. Atomic appends. The COMMITTED strategy advances the stream's next offset before
   the rows are inserted; when the insert fails, the offset stays advanced, so a retry
   at the same offset gets ALREADY_EXISTS for rows that were never stored. Real
   BigQuery appends atomically; the patch restores the offset if the insert fails.

4a. No deadlock between the REST and gRPC sides. bqemulator 1.4.0 uses one DuckDB
   connection from the asyncio thread (REST) and from the gRPC threads. Appends
   register an Arrow table on it; dropping that table runs a Python destructor that
   takes the GIL while DuckDB holds the connection's lock. If the REST thread holds
   the GIL and waits for that lock at the same moment, neither moves again (seen with
   gdb in CI: `ClientContext::LockContext` on the main thread, `take_gil` under
   `~PythonDependencyItem` on a gRPC thread). The patched flush registers and inserts
   on a per-thread cursor (a connection of its own to the same database), so the
   REST thread never waits on the lock the destructor holds.

4. Enough gRPC threads. `grpc.aio` runs bqemulator's synchronous handlers on a
   default pool of min(32, cores + 4) threads (6 on a 2-core machine), and every open
   AppendRows stream holds one for its lifetime: a job with 8 shards starved. The
   pool is raised to FLEXRUN_BQ_GRPC_THREADS (default 128).

Where flexrun's exactly-once depends on BigQuery's documented behaviour and the
stock emulator is lenient, the launcher makes it behave as documented:

5. COMMITTED streams report commit_time = create_time, and create_time is the
   stream's own (stock: commit_time unset, create_time = now on every Get).
   storage.proto, WriteStream.commit_time: "If a stream is of `COMMITTED` type,
   then it will have a commit_time same as `create_time`."
6. Oversize requests: INVALID_ARGUMENT, not RESOURCE_EXHAUSTED. storage.proto,
   AppendRowsRequest: "The size of a single AppendRowsRequest must be less than
   10 MB in size. Requests larger than this return an error, typically
   `INVALID_ARGUMENT`." The message is BigQuery's own ("AppendRows request too
   large: N limit 10485760", as reported by users of the real service).
7. Appends to a finalized stream: INVALID_ARGUMENT with a StorageError of code
   STREAM_FINALIZED in the status details (stock: FAILED_PRECONDITION, no details).
   storage.proto, StorageErrorCode: "STREAM_FINALIZED = 6; Stream is finalized."
   The code and message are those the Java client's integration tests see from the
   real service ("Stream has been finalized").
8. A table widened with tables.patch/update (a NULLABLE column added, the documented way
   to add a column) gets the column in its storage too. Stock: only the catalog changes,
   and every later append fails with "table has 3 columns but 4 values were supplied".
9. Fault injection for tests, on loopback HTTP (FLEXRUN_BQ_FAULT_PORT), scoped to
   one table so that tests running in parallel, each on its own table, never fault
   or count each other's calls. POST /faults with JSON, any of
     {"table": "dataset.table", "fail_next": N, "code": "UNAVAILABLE"}
                                          the next N Storage Write calls on it fail
                                          (with "on": "create" | "get" | "append",
                                          only calls of that kind)
     {"table": "dataset.table", "fail_for_s": S, "code": "RESOURCE_EXHAUSTED"}
                                          every call on it fails for S s
     {"table": "dataset.table", "reject_rows_containing": "text"}
                                          its rows with that text in a STRING column
                                          get row_errors (nothing written)
     {"finalize_table": "dataset.table"}  finalize every COMMITTED stream of it
     {"drop_table_streams": "dataset.table"}  forget them (an expired stream)
     {"table": "dataset.table", "schema_lag_s": S}
                                          a schema change reaches its writers S s late (13)
     {"table": "dataset.table", "rest_unavailable_next": N}
                                          the next N REST tables.get / tables.patch calls
                                          on it answer 503 backendError, as BigQuery's
                                          error table lists it (counted: injected_rest)
     {"table": "dataset.table", "patch_rate_limited_next": N}
                                          the next N tables.patch calls on it answer 403
                                          rateLimitExceeded, as past the update rate (14)
   Without "table" a fault applies to every table (no test does that any more).
   POST /reset {"table": "dataset.table"} clears that table's faults ({} clears all);
   GET /stats?table=dataset.table returns its call counters (no table: all calls):
   create_write_stream, get_write_stream, append_requests, default_stream_appends
   (those on the `_default` stream), injected_failures (and by call: injected_create,
   injected_get, injected_append), rows_rejected and cdc_changes (CDC rows received).
10. tables.insert refuses partitioning and clustering that BigQuery refuses, with
   400 "invalid" (stock: stores any field name and any column type, and answers an
   unknown partition type with 500). The rules, from Google's pages:
   "The partitioning column must be either a scalar DATE, TIMESTAMP, or DATETIME
   column. While the mode of the column can be REQUIRED or NULLABLE, it cannot be
   REPEATED" and "must be a top-level field"
   (https://cloud.google.com/bigquery/docs/creating-column-partitions);
   "The supported types are DAY, HOUR, MONTH, and YEAR" (TimePartitioning.type);
   "Clustering columns must be top-level, non-repeated columns of one of the following
   types: DATE BOOL GEOGRAPHY INT64 NUMERIC BIGNUMERIC STRING TIMESTAMP DATETIME" and
   "You can specify up to four clustering columns"
   (https://cloud.google.com/bigquery/docs/creating-clustered-tables).

11. CDC (change data capture) through Storage Write, as
   https://cloud.google.com/bigquery/docs/change-data-capture describes it (stock: the
   primary key is dropped on tables.insert and `_CHANGE_TYPE` rows are appended as plain
   inserts). tables.insert keeps `tableConstraints.primaryKey` (at most 16 columns:
   "Composite primary keys containing up to 16 columns are supported") and `maxStaleness`,
   and tables.get returns them. A row carrying `_CHANGE_TYPE` is applied by key:
   "The pseudocolumn _CHANGE_TYPE only accepts the values UPSERT and DELETE"; UPSERT
   replaces the row with the same primary key or inserts it, DELETE removes it. "You must
   use the Storage Write API in the default stream" and "You must declare primary keys for
   the destination table": a `_CHANGE_TYPE` row on another stream, or to a table without a
   primary key, is refused with INVALID_ARGUMENT and nothing of the request is written.
   `_CHANGE_SEQUENCE_NUMBER` orders the changes to one key: up to four hexadecimal sections
   separated by "/", each at most 16 hex digits, compared section by section (the format
   Apache Beam's RowMutationInformation documents; Google's page gives none). A change
   whose number is lower than the last applied to its key is ignored, so a stale change
   that arrives late loses; an equal number applies again (a resent change is the same
   change). Without a number, arrival order decides. BigQuery applies changes in the
   background (max_staleness); here they apply at append, which is the state a query
   sees once BigQuery has caught up.

14. tables.patch and tables.update are limited to 5 per table in 10 s, as BigQuery
   limits table metadata updates: after 5 that changed the table, the next answers 403
   rateLimitExceeded (counted: rate_limited_patches). A refused update (400) changed
   nothing and is not counted. See the comment at TABLE_UPDATES_PER_WINDOW.

12. A query that fails is a failed request, as BigQuery's API documents it (stock: jobs.query
   answers HTTP 200 with the error in the body's `errors` and no rows, so a client reads an
   invalid query as an empty result). https://cloud.google.com/bigquery/docs/errors:
   "Successful requests return HTTP status codes in the 2xx range. Failed requests return
   status codes in the 4xx and 5xx ranges", and its table gives `invalidQuery` 400 ("This
   error occurs when you attempt to run an invalid query"), `notFound` 404, `accessDenied`
   403 and `duplicate` 409. jobs.query now answers such a query with that status and
   Google's error envelope `{"error": {"code", "message", "errors": [{reason, message,
   domain}], "status"}}`; the failed job stays recorded as before.

13. Schema updates, as BigQuery documents them (stock: tables.patch/update replaces the
   schema without checks, appends insert by position, and a connection keeps the schema it
   was opened with, so an append after a column was added fails with "table has N columns
   but N-1 values were supplied", and a writer field the table lacks is silently dropped).
   - tables.patch/update refuse what BigQuery refuses, with 400 "invalid"
     (https://cloud.google.com/bigquery/docs/managing-table-schemas): "If you add new columns
     to an existing table schema, the columns must be NULLABLE or REPEATED. You cannot add a
     REQUIRED column to an existing table schema"; a column may be relaxed from REQUIRED to
     NULLABLE ("Change a column's mode from REQUIRED to NULLABLE"); dropping a column, changing
     its type or tightening its mode are refused (messages as BigQuery words them: "Provided
     Schema does not match Table ..."), and so is a new column whose name BigQuery refuses
     (empty, over 300 characters, other than letters, digits and underscores, or a reserved
     prefix such as _PARTITION: https://cloud.google.com/bigquery/docs/schemas#column_names).
   - A writer schema with a field the table (as this connection sees it) lacks is refused
     with INVALID_ARGUMENT and a StorageError SCHEMA_MISMATCH_EXTRA_FIELDS (storage.proto:
     "There is a schema mismatch and it is caused by user schema has extra field than
     bigquery schema"), worded as the real service does ("Input schema has more fields than
     BigQuery schema, extra fields: 'f' Entity: <stream>", apache/beam#27892). Nothing of
     the request is written.
   - A widened table reaches its write connections: each append checks whether the table's
     schema changed and rebinds. Google says new columns reach writers "after some time (in
     order of minutes)" (JsonStreamWriter); a test can make a table lag like that with
     POST /faults {"table": "dataset.table", "schema_lag_s": S}: for S seconds after a change
     every connection, old or new, keeps the schema from before it.
   - Rows are inserted by column name, so an append from a connection bound before the
     change lands with the new column NULL; REPEATED columns are added as lists and RECORD
     columns as structs (stock patch 8 skipped RECORD columns).

Each patch checks that the code it replaces is still there, so a different
bqemulator version fails loudly instead of running unpatched.
"""
import concurrent.futures
import http.server
import json
import os
import sys
import threading
import time

import grpc
from bqemulator.grpc_api import write_servicer
from bqemulator.versioning import snapshots


def _record_change_without_snapshot(self, project_id, dataset_id, table_id):
    self._events.publish(snapshots.TableDataChanged(project_id, dataset_id, table_id))
    return None


def _field_dict(f):
    d = {"name": f.name, "type": f.type, "mode": f.mode}
    if f.fields:
        d["fields"] = [_field_dict(s) for s in f.fields]
    return d


def _table_arrow_schema_with_nested_fields(table_meta):
    from bqemulator.api.routes.tabledata import _build_arrow_schema

    return _build_arrow_schema([_field_dict(f) for f in table_meta.schema_.fields])


_STATS_KEYS = (
    "create_write_stream", "get_write_stream", "append_requests", "default_stream_appends",
    "injected_failures", "injected_create", "injected_get", "injected_append", "injected_rest", "rows_rejected",
)


def _table_of(resource):
    """"dataset.table" of a table or stream resource name
    (projects/p/datasets/d/tables/t[/streams/s]), or "" when it names neither."""
    parts = (resource or "").split("/")
    try:
        return f"{parts[parts.index('datasets') + 1]}.{parts[parts.index('tables') + 1]}"
    except (ValueError, IndexError):
        return ""


class _TableFaults:
    """What a test asked for one table (or, under the key "", for every table)."""

    def __init__(self):
        self.fail_next = 0
        self.fail_until = 0.0
        self.code = "UNAVAILABLE"
        self.reject = None
        self.on = None  # None: every call; else only "create", "get" or "append"
        self.schema_lag_s = 0.0  # patch 13: how long a schema change takes to reach writers
        self.rest_unavailable = 0  # the next N REST tables.get/patch calls answer 503
        self.rest_rate_limited = 0  # the next N tables.patch calls answer 403 rateLimitExceeded

    def take(self, method):
        """Consume one injected failure for a `method` call: its status code name, or None."""
        if self.on is not None and self.on != method:
            return None
        if self.fail_next > 0:
            self.fail_next -= 1
            return self.code
        if time.monotonic() < self.fail_until:
            return self.code
        return None


class _Faults:
    """Faults tests asked for, and counters of what the Storage Write API served, both
    kept per table ("dataset.table") so that tests running in parallel, each on its own
    table, neither fault nor count each other's calls. The key "" holds faults meant for
    every table and counters over all of them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self, table=None):
        with self.lock:
            if table is None:
                self.tables = {}
                self.stats = {}
            else:
                self.tables.pop(table, None)

    def faults_of(self, table):
        """The (created) fault set of `table`. Call under the lock."""
        return self.tables.setdefault(table, _TableFaults())

    def stats_of(self, table):
        with self.lock:
            return dict({k: 0 for k in _STATS_KEYS}, **self.stats.get(table, {}))

    def count(self, key, n=1, table=""):
        with self.lock:
            for t in {"", table}:
                row = self.stats.setdefault(t, {})
                row[key] = row.get(key, 0) + n

    def reject_marker(self, table):
        with self.lock:
            for t in (table, ""):
                f = self.tables.get(t)
                if f is not None and f.reject:
                    return f.reject
        return None

    def take_failure(self, table, method):
        """The status code to fail this `method` call on `table` with, or None."""
        with self.lock:
            code = None
            for t in (table, ""):
                f = self.tables.get(t)
                code = f.take(method) if f is not None else None
                if code is not None:
                    break
        if code is None:
            return None
        self.count("injected_failures", table=table)
        self.count(f"injected_{method}", table=table)
        return getattr(grpc.StatusCode, code)


FAULTS = _Faults()
HANDLER = {}


def _maybe_fail(context, table, method):
    code = FAULTS.take_failure(table, method)
    if code is not None:
        context.abort(code, f"injected fault ({code.name}) from the flexrun launcher")


def _storage_error_status(code, message, storage_code, entity):
    from google.cloud.bigquery_storage_v1 import types
    from google.protobuf import any_pb2
    from google.rpc import status_pb2

    detail = any_pb2.Any()
    detail.Pack(types.StorageError.pb(types.StorageError(code=storage_code, entity=entity, error_message=message)))
    return status_pb2.Status(code=code.value[0], message=message, details=[detail])


def _response_with_status(stream_name, status):
    from google.cloud.bigquery_storage_v1 import types

    return types.AppendRowsResponse.serialize(types.AppendRowsResponse(write_stream=stream_name, error=status))


def _rows_to_reject(stream_name, rows_table):
    marker = FAULTS.reject_marker(_table_of(stream_name))
    if not marker:
        return []
    import pyarrow as pa

    hits = set()
    for name in rows_table.column_names:
        col = rows_table.column(name)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            for i, v in enumerate(col.to_pylist()):
                if v is not None and marker in v:
                    hits.add(i)
    return sorted(hits)


def _row_errors_response(stream_name, indices):
    from google.cloud.bigquery_storage_v1 import types

    errs = [types.RowError(index=i, code=types.RowError.RowErrorCode.FIELDS_ERROR, message=f"row {i} rejected by an injected fault") for i in indices]
    return types.AppendRowsResponse.serialize(types.AppendRowsResponse(write_stream=stream_name, row_errors=errs))


def _atomic_perform_append(self, bound_stream, rows_table, offset, max_buffered_rows):
    """bqemulator 1.4.0's `_perform_append`, with the offset restored if the insert
    fails, injected row errors, and finalized streams answered as BigQuery does."""
    from google.cloud.bigquery_storage_v1 import types

    ws = write_servicer
    strategy = ws.select_strategy(bound_stream.stream_type)
    with bound_stream.lock:
        if why := _cdc_refusal(bound_stream, rows_table):
            return ws._error_response(bound_stream.name, why, status_code=grpc.StatusCode.INVALID_ARGUMENT)
        rejected = _rows_to_reject(bound_stream.name, rows_table)
        if rejected:
            FAULTS.count("rows_rejected", len(rejected), table=_table_of(bound_stream.name))
            return _row_errors_response(bound_stream.name, rejected)
        before = (bound_stream.next_offset, bound_stream.row_count)
        outcome = strategy.append(bound_stream, rows_table, offset, max_buffered_rows=max_buffered_rows)
        if outcome.status is ws.AppendStatus.STREAM_FINALIZED:
            st = _storage_error_status(grpc.StatusCode.INVALID_ARGUMENT, "Stream has been finalized", types.StorageError.StorageErrorCode.STREAM_FINALIZED, bound_stream.name)
            return _response_with_status(bound_stream.name, st)
        if outcome.status is not ws.AppendStatus.OK:
            return ws._error_response(bound_stream.name, outcome.detail, status_code=ws._proto_to_grpc_status(outcome.status))
        if outcome.committed_rows is not None and outcome.committed_rows.num_rows > 0:
            try:
                self._flush_to_target(bound_stream, outcome.committed_rows)
            except Exception:
                bound_stream.next_offset, bound_stream.row_count = before
                raise
    return ws._ok_response(bound_stream.name, outcome)


_CURSORS = threading.local()


def _flush_to_target(self, stream, rows):
    """bqemulator 1.4.0's `_flush_to_target`, with the Arrow table registered and
    inserted on this thread's own cursor instead of the shared connection (item 4a)."""
    from bqemulator.grpc_api.write_servicer import quoted_table_ref, register_name
    from uuid import uuid4

    cursor = getattr(_CURSORS, "cursor", None)
    if cursor is None:
        cursor = self._ctx.engine.connection.cursor()
        _CURSORS.cursor = cursor
    target_ref = quoted_table_ref(stream.project_id, stream.dataset_id, stream.table_id)
    reg_name = register_name(f"__bqemu_write_{uuid4().hex[:12]}")
    with self._write_lock:
        if CHANGE_TYPE in rows.column_names:
            _apply_changes(self, stream, rows, cursor, target_ref)
            added = None
        else:
            cursor.register(reg_name, rows)
            try:
                cursor.execute(f"INSERT INTO {target_ref} BY NAME SELECT * FROM {reg_name}")
            finally:
                cursor.unregister(reg_name)
            added = rows.num_rows
        table_meta = self._ctx.catalog.get_table(stream.project_id, stream.dataset_id, stream.table_id)
        if table_meta is not None:
            n = table_meta.num_rows + added if added is not None else cursor.execute(f"SELECT COUNT(*) FROM {target_ref}").fetchone()[0]
            self._ctx.catalog.update_table(table_meta.model_copy(update={"num_rows": n}))
        self._ctx.snapshots.record_change(stream.project_id, stream.dataset_id, stream.table_id)


def _oversize_invalid_argument(*, request_bytes_len, max_bytes, bound_ctx):
    stream_name = bound_ctx[0].name if bound_ctx else ""
    return write_servicer._error_response(
        stream_name,
        f"AppendRows request too large: {request_bytes_len} limit {max_bytes}",
        status_code=grpc.StatusCode.INVALID_ARGUMENT,
    )


_CREATE_TIMES = {}


def _with_commit_time(response_bytes):
    """Give a WriteStream response its stable create_time, and commit_time = create_time
    for COMMITTED streams."""
    from google.cloud.bigquery_storage_v1 import types

    if not response_bytes:
        return response_bytes
    ws = types.WriteStream.deserialize(response_bytes)
    created = _CREATE_TIMES.setdefault(ws.name, ws.create_time)
    ws.create_time = created
    if ws.type_ == types.WriteStream.Type.COMMITTED:
        ws.commit_time = created
    return types.WriteStream.serialize(ws)


_orig_init = write_servicer.BigQueryWriteHandler.__init__
_orig_create = write_servicer.BigQueryWriteHandler._handle_create_write_stream
_orig_get = write_servicer.BigQueryWriteHandler._handle_get_write_stream
_orig_append = write_servicer.BigQueryWriteHandler._handle_append_rows


def _init(self, *args, **kwargs):
    _orig_init(self, *args, **kwargs)
    HANDLER["write"] = self


def _create(self, request_bytes, context):
    from google.cloud.bigquery_storage_v1 import types

    table = _table_of(types.CreateWriteStreamRequest.deserialize(request_bytes).parent)
    FAULTS.count("create_write_stream", table=table)
    _maybe_fail(context, table, "create")
    return _with_commit_time(_orig_create(self, request_bytes, context))


def _get(self, request_bytes, context):
    from google.cloud.bigquery_storage_v1 import types

    table = _table_of(types.GetWriteStreamRequest.deserialize(request_bytes).name)
    FAULTS.count("get_write_stream", table=table)
    _maybe_fail(context, table, "get")
    return _with_commit_time(_orig_get(self, request_bytes, context))


def _append(self, request_iterator, context):
    from google.cloud.bigquery_storage_v1 import types

    def requests():
        # Only a connection's first request must name its stream (storage.proto:
        # "the first request ... must contain the write_stream"); later ones may not.
        table, stream = "", ""
        for r in request_iterator:
            stream = types.AppendRowsRequest.deserialize(r).write_stream or stream
            table = _table_of(stream) or table
            FAULTS.count("append_requests", table=table)
            if stream.endswith("/_default"):
                FAULTS.count("default_stream_appends", table=table)
            _maybe_fail(context, table, "append")
            yield r

    yield from _orig_append(self, requests(), context)


def _streams_of(table):
    handler = HANDLER.get("write")
    if handler is None:
        return []
    dataset, _, name = table.partition(".")
    suffix = f"/datasets/{dataset}/tables/{name}/streams/"
    return [s for s in handler.manager.list_active() if suffix in s.name and not s.name.endswith("/_default")]


class _FaultServer(http.server.BaseHTTPRequestHandler):
    def _reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        from urllib import parse

        query = parse.parse_qs(parse.urlsplit(self.path).query)
        self._reply(200, FAULTS.stats_of(query.get("table", [""])[0]))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        table = body.get("table", body.get("reject_table", ""))
        if self.path == "/reset":
            FAULTS.reset(table if "table" in body else None)
            return self._reply(200, {"ok": True})
        if self.path != "/faults":
            return self._reply(404, {"error": "POST /faults or /reset"})
        done = {}
        with FAULTS.lock:
            f = FAULTS.faults_of(table)
            if "code" in body:
                if not hasattr(grpc.StatusCode, body["code"]):
                    return self._reply(400, {"error": f"unknown status code {body['code']}"})
                f.code = body["code"]
            if "fail_next" in body:
                f.fail_next = int(body["fail_next"])
            if "fail_for_s" in body:
                f.fail_until = time.monotonic() + float(body["fail_for_s"])
            if "reject_rows_containing" in body:
                f.reject = body["reject_rows_containing"] or None
            if "schema_lag_s" in body:
                f.schema_lag_s = float(body["schema_lag_s"])
            if "rest_unavailable_next" in body:
                f.rest_unavailable = int(body["rest_unavailable_next"])
            if "patch_rate_limited_next" in body:
                f.rest_rate_limited = int(body["patch_rate_limited_next"])
            if "on" in body:
                if body["on"] not in (None, "create", "get", "append"):
                    return self._reply(400, {"error": f"unknown call {body['on']}: create, get or append"})
                f.on = body["on"]
        if "finalize_table" in body:
            from bqemulator.streaming.write_stream import WriteStreamState

            streams = _streams_of(body["finalize_table"])
            for st in streams:
                st.state = WriteStreamState.FINALIZED
            done["finalized"] = [st.name for st in streams]
        if "drop_table_streams" in body:
            streams = _streams_of(body["drop_table_streams"])
            for st in streams:
                HANDLER["write"].manager.delete(st.name)
            done["dropped"] = [st.name for st in streams]
        self._reply(200, {"ok": True, **done})

    def log_message(self, *args):
        pass


def _adding_columns(orig):
    def update_table(self, table):
        """The repository's update_table, then ALTER TABLE ADD COLUMN for each new
        top-level scalar column, so storage matches the catalog."""
        from bqemulator.storage.sql_identifiers import quoted_table_ref
        from bqemulator.storage.type_map import bq_to_duckdb

        old = self.get_table(table.project_id, table.dataset_id, table.table_id)
        before = {f.name for f in old.schema_.fields} if old is not None and old.schema_ else set()
        updated = orig(self, table)
        engine = getattr(self, "_engine", None)
        def duck_type(f):
            t = f"STRUCT({', '.join(f'{chr(34)}{s.name}{chr(34)} {duck_type(s)}' for s in f.fields)})" if f.fields else bq_to_duckdb(f.type)
            return t + ("[]" if (f.mode or "").upper() == "REPEATED" else "")

        for f in updated.schema_.fields if updated.schema_ and engine is not None else []:
            if f.name not in before:
                ref = quoted_table_ref(table.project_id, table.dataset_id, table.table_id)
                engine.execute(f'ALTER TABLE {ref} ADD COLUMN "{f.name}" {duck_type(f)}')
        if old is not None and old.schema_ and updated.schema_ and _field_shape(old) != _field_shape(updated):
            _schema_changed(f"{table.dataset_id}.{table.table_id}", _table_arrow_schema_with_nested_fields(old))
        return updated

    return update_table


_PARTITION_TYPES = {"DATE", "TIMESTAMP", "DATETIME"}
_CLUSTER_TYPES = {"DATE", "BOOL", "BOOLEAN", "GEOGRAPHY", "INT64", "INTEGER", "NUMERIC", "BIGNUMERIC",
                  "STRING", "TIMESTAMP", "DATETIME"}


def _layout_problem(body):
    """Why BigQuery would refuse this tables.insert body's partitioning or clustering."""
    cols = {f.get("name", "").lower(): f for f in (body.get("schema") or {}).get("fields") or []}

    def column(name, allowed, what):
        f = cols.get((name or "").lower())
        if f is None:
            return f"{what} field {name} not found in the table schema"
        if f.get("mode", "NULLABLE").upper() == "REPEATED" or f.get("type", "").upper() not in allowed:
            return f"{what} field {name} has type {f.get('mode', 'NULLABLE')} {f.get('type')}, which is not allowed"
        return None

    tp = body.get("timePartitioning")
    if tp is not None:
        if tp.get("type", "DAY") not in ("DAY", "HOUR", "MONTH", "YEAR"):
            return f"timePartitioning.type {tp.get('type')} is not one of DAY, HOUR, MONTH, YEAR"
        if tp.get("field") and (why := column(tp["field"], _PARTITION_TYPES, "Partitioning")):
            return why
    fields = (body.get("clustering") or {}).get("fields") or []
    if len(fields) > 4:
        return f"Too many clustering fields: {len(fields)}, only 4 allowed"
    for name in fields:
        if why := column(name, _CLUSTER_TYPES, "Clustering"):
            return why
    return None


def _checking_layout(orig):
    def rest_to_table_meta(project_id, dataset_id, body, clock, existing=None):
        from bqemulator.domain.errors import ValidationError

        if existing is None and (why := _layout_problem(body)):
            raise ValidationError(why)
        return orig(project_id, dataset_id, body, clock, existing)

    return rest_to_table_meta


_CDC_KEYS = {}  # "dataset.table" -> (primary key columns, maxStaleness or None)
_CDC_LAST = {}  # ("dataset.table", key tuple) -> sequence tuple of the last change applied
_CDC_COUNTER = [0]
_CDC_LOCK = threading.Lock()
CHANGE_TYPE = "_CHANGE_TYPE"
CHANGE_SEQ = "_CHANGE_SEQUENCE_NUMBER"


def _cdc_problem(body):
    """Why BigQuery would refuse this tables.insert body's primary key."""
    pk = (((body.get("tableConstraints") or {}).get("primaryKey") or {}).get("columns")) or []
    cols = {f.get("name", "").lower(): f for f in (body.get("schema") or {}).get("fields") or []}
    if len(pk) > 16:
        return f"a primary key has at most 16 columns; {len(pk)} were given"
    for c in pk:
        f = cols.get(c.lower())
        if f is None:
            return f"primary key column {c} not found in the table schema"
        if f.get("mode", "NULLABLE").upper() == "REPEATED" or f.get("type", "").upper() in ("RECORD", "STRUCT"):
            return f"primary key column {c} must be a top-level scalar column"
    return None


def _keeping_constraints(orig):
    def rest_to_table_meta(project_id, dataset_id, body, clock, existing=None):
        from bqemulator.domain.errors import ValidationError

        if existing is None:
            if why := _cdc_problem(body):
                raise ValidationError(why)
            table = f"{dataset_id}.{(body.get('tableReference') or {}).get('tableId', '')}"
            pk = (((body.get("tableConstraints") or {}).get("primaryKey") or {}).get("columns")) or []
            with _CDC_LOCK:
                for k in [k for k in _CDC_LAST if k[0] == table]:
                    del _CDC_LAST[k]
                _CDC_KEYS[table] = (list(pk), body.get("maxStaleness"))
        return orig(project_id, dataset_id, body, clock, existing)

    return rest_to_table_meta


def _showing_constraints(orig):
    def table_to_rest(t):
        body = orig(t)
        pk, staleness = _CDC_KEYS.get(f"{t.dataset_id}.{t.table_id}", ([], None))
        if pk:
            body["tableConstraints"] = {"primaryKey": {"columns": pk}}
        if staleness:
            body["maxStaleness"] = staleness
        return body

    return table_to_rest


def _with_change_columns(orig):
    """proto_rows_to_arrow_table, keeping `_CHANGE_TYPE` and `_CHANGE_SEQUENCE_NUMBER`
    as two extra columns when the writer's descriptor has them."""

    def proto_rows_to_arrow_table(decoder, serialized_rows, target_schema):
        import pyarrow as pa

        table = orig(decoder, serialized_rows, target_schema)
        names = {f.name for f in decoder._descriptor.fields} if hasattr(decoder, "_descriptor") else None
        if names is None:
            names = set()
            for raw in serialized_rows[:1]:
                names = set(decoder.decode(raw).keys())
        if CHANGE_TYPE not in names:
            return table
        types, seqs = [], []
        for raw in serialized_rows:
            row = decoder.decode(raw)
            types.append(row.get(CHANGE_TYPE))
            seqs.append(row.get(CHANGE_SEQ))
        table = table.append_column(CHANGE_TYPE, pa.array(types, type=pa.string()))
        return table.append_column(CHANGE_SEQ, pa.array(seqs, type=pa.string()))

    return proto_rows_to_arrow_table


def _seq(text):
    """A _CHANGE_SEQUENCE_NUMBER as a comparable tuple, or a reason it is not one."""
    parts = text.split("/")
    if not 1 <= len(parts) <= 4 or any(not p or len(p) > 16 for p in parts):
        return None, f"_CHANGE_SEQUENCE_NUMBER {text!r}: expected 1 to 4 hexadecimal sections of at most 16 digits, separated by '/'"
    try:
        return tuple(int(p, 16) for p in parts), None
    except ValueError:
        return None, f"_CHANGE_SEQUENCE_NUMBER {text!r} is not hexadecimal"


def _cdc_refusal(stream, rows):
    """Why BigQuery would refuse these change rows, or None."""
    if CHANGE_TYPE not in rows.column_names:
        return None
    table = _table_of(stream.name)
    if not stream.name.endswith("/_default"):
        return "CDC writes (_CHANGE_TYPE) must use the table's default stream"
    if not _CDC_KEYS.get(table, ([], None))[0]:
        return f"CDC writes (_CHANGE_TYPE) need a primary key on the destination table {table}"
    for t in rows.column(CHANGE_TYPE).to_pylist():
        if t not in ("UPSERT", "DELETE"):
            return f"_CHANGE_TYPE {t!r}: only UPSERT and DELETE are accepted"
    for q in rows.column(CHANGE_SEQ).to_pylist():
        if q is not None and (why := _seq(q)[1]):
            return why
    return None


def _apply_changes(self, stream, rows, cursor, target_ref):
    """Apply change rows by primary key (under the write lock): for each key the change
    with the highest sequence number wins, if it is not older than the last applied."""
    import pyarrow as pa

    table = _table_of(stream.name)
    FAULTS.count("cdc_changes", rows.num_rows, table=table)
    pk = _CDC_KEYS[table][0]
    data = rows.drop_columns([CHANGE_TYPE, CHANGE_SEQ])
    types = rows.column(CHANGE_TYPE).to_pylist()
    seqs = rows.column(CHANGE_SEQ).to_pylist()
    keys = list(zip(*[data.column(c).to_pylist() for c in pk]))
    winners = {}
    with _CDC_LOCK:
        for i, key in enumerate(keys):
            if seqs[i] is None:
                _CDC_COUNTER[0] += 1
                seq = (1 << 64, _CDC_COUNTER[0])
            else:
                seq = _seq(seqs[i])[0]
            last = _CDC_LAST.get((table, key))
            best = winners.get(key)
            if (last is None or seq >= last) and (best is None or seq >= best[0]):
                winners[key] = (seq, i)
        for key, (seq, _) in winners.items():
            _CDC_LAST[(table, key)] = seq
    if not winners:
        return
    idx = sorted(i for _, i in winners.values())
    changed = data.take(pa.array(idx, type=pa.int64()))
    upserts = data.take(pa.array([i for i in idx if types[i] == "UPSERT"], type=pa.int64()))
    match = " AND ".join(f'cdc_t."{c}" IS NOT DISTINCT FROM k."{c}"' for c in pk)
    reg_keys = write_servicer.register_name(f"__bqemu_cdc_keys_{os.getpid()}_{threading.get_ident()}")
    reg_rows = write_servicer.register_name(f"__bqemu_cdc_rows_{os.getpid()}_{threading.get_ident()}")
    cursor.register(reg_keys, changed.select(pk))
    try:
        cursor.execute(f"DELETE FROM {target_ref} AS cdc_t WHERE EXISTS (SELECT 1 FROM {reg_keys} k WHERE {match})")
    finally:
        cursor.unregister(reg_keys)
    if upserts.num_rows:
        cursor.register(reg_rows, upserts)
        try:
            cursor.execute(f"INSERT INTO {target_ref} BY NAME SELECT * FROM {reg_rows}")
        finally:
            cursor.unregister(reg_rows)


# Patch 13: schema updates.
_SCHEMA_CHANGES = {}  # "dataset.table" -> (monotonic time of the last change, Arrow schema before it)
EXTRA_FIELDS = "Input schema has more fields than BigQuery schema, extra fields: "


def _field_shape(meta):
    return [(f.name, f.type, f.mode) for f in meta.schema_.fields]


def _schema_changed(table, before):
    with FAULTS.lock:
        _SCHEMA_CHANGES[table] = (time.monotonic(), before)


def _schema_lag(table):
    """The Arrow schema writers of `table` still see (within its schema_lag_s), or None."""
    with FAULTS.lock:
        change = _SCHEMA_CHANGES.get(table)
        f = FAULTS.tables.get(table)
        lag = f.schema_lag_s if f is not None else 0.0
    if change is None or time.monotonic() >= change[0] + lag:
        return None
    return change[1]


def _norm_type(t):
    t = (t or "STRING").upper()
    return {"INT64": "INTEGER", "FLOAT64": "FLOAT", "BOOL": "BOOLEAN", "STRUCT": "RECORD"}.get(t, t)


_RESERVED_PREFIXES = ("_TABLE_", "_FILE_", "_PARTITION", "_ROW_TIMESTAMP", "__ROOT__", "_COLON_")


def _field_name_problem(name):
    """Why BigQuery refuses `name` for a new column (https://cloud.google.com/bigquery/docs/schemas#column_names):
    "A column name can contain letters (a-z, A-Z), numbers (0-9), or underscores (_), and
    it must start with a letter or underscore", at most 300 characters, and "Column names
    cannot use any of the following prefixes: _TABLE_, _FILE_, _PARTITION, _ROW_TIMESTAMP,
    __ROOT__, _COLON_" (flexible column names are not modelled). Stock stores any name."""
    import re
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,299}", name):
        return f"Invalid field name \"{name[:64]}\". Fields must contain only letters, numbers, and underscores, start with a letter or underscore, and be at most 300 characters long."
    if any(name.upper().startswith(p) for p in _RESERVED_PREFIXES):
        return f"Invalid field name \"{name}\". Field names are not allowed to start with the (case-insensitive) prefixes {', '.join(_RESERVED_PREFIXES)}"
    return None


def _schema_update_problem(ref, old_fields, new_fields, prefix=""):
    """Why BigQuery would refuse replacing `old_fields` (catalog objects) with `new_fields`
    (REST dicts), or None."""
    new = {(f.get("name") or "").lower(): f for f in new_fields}
    old_names = set()
    for o in old_fields:
        name = prefix + o.name
        old_names.add(o.name.lower())
        n = new.get(o.name.lower())
        if n is None:
            return f"Provided Schema does not match Table {ref}. Field {name} is missing in new schema"
        ot, nt = _norm_type(o.type), _norm_type(n.get("type"))
        if ot != nt:
            return f"Provided Schema does not match Table {ref}. Field {name} has changed type from {ot} to {nt}"
        om, nm = (o.mode or "NULLABLE").upper(), (n.get("mode") or "NULLABLE").upper()
        if om != nm and not (om == "REQUIRED" and nm == "NULLABLE"):
            return f"Provided Schema does not match Table {ref}. Field {name} has changed mode from {om} to {nm}"
        if o.fields:
            if why := _schema_update_problem(ref, o.fields, n.get("fields") or [], name + "."):
                return why
    for key, n in new.items():
        if key not in old_names and (why := _field_name_problem(n.get("name") or "")):
            return why
        if key not in old_names and (n.get("mode") or "NULLABLE").upper() == "REQUIRED":
            return f"Provided Schema does not match Table {ref}. Cannot add required fields to an existing schema. (field: {prefix}{n.get('name')})"
    return None


def _checking_schema_updates(orig):
    def rest_to_table_meta(project_id, dataset_id, body, clock, existing=None):
        from bqemulator.domain.errors import ValidationError

        fields = (body.get("schema") or {}).get("fields")
        if existing is not None and fields is not None and existing.schema_ is not None:
            ref = f"{project_id}:{dataset_id}.{existing.table_id}"
            if why := _schema_update_problem(ref, existing.schema_.fields, fields):
                raise ValidationError(why)
        return orig(project_id, dataset_id, body, clock, existing)

    return rest_to_table_meta


_orig_bind = write_servicer.BigQueryWriteHandler._bind_stream_to_target
_orig_ensure_bound = write_servicer.BigQueryWriteHandler._ensure_stream_bound


def _bind_stream_to_target(self, stream_name, context):
    """Bind as stock does, but to the schema from before a change still within its lag."""
    bound = _orig_bind(self, stream_name, context)
    if bound is not None and (before := _schema_lag(_table_of(stream_name))) is not None:
        return bound[0], before
    return bound


def _ensure_stream_bound(self, stream_name, bound_ctx, context):
    """Stock keeps a connection's first binding for its life; here a connection to a table
    whose schema changed since is bound again (once the change has reached writers)."""
    if bound_ctx is not None and bound_ctx[0].name == stream_name:
        table = _table_of(stream_name)
        if table not in _SCHEMA_CHANGES or _schema_lag(table) is not None:
            return bound_ctx
        meta = self._ctx.catalog.get_table(bound_ctx[0].project_id, bound_ctx[0].dataset_id, bound_ctx[0].table_id)
        if meta is None or _table_arrow_schema_with_nested_fields(meta).names == bound_ctx[1].names:
            return bound_ctx
        return self._bind_stream_to_target(stream_name, context)
    return _orig_ensure_bound(self, stream_name, bound_ctx, context)


def _refusing_extra_fields(orig):
    """proto_rows_to_arrow_table, refusing a writer schema with fields the target lacks."""

    def proto_rows_to_arrow_table(decoder, serialized_rows, target_schema):
        names = [f.name for f in decoder._descriptor.fields] if hasattr(decoder, "_descriptor") else []
        have = {n.lower() for n in target_schema.names} | {CHANGE_TYPE.lower(), CHANGE_SEQ.lower()}
        extra = [n for n in names if n.lower() not in have]
        if extra:
            raise ValueError(EXTRA_FIELDS + ", ".join(f"'{n}'" for n in extra))
        return orig(decoder, serialized_rows, target_schema)

    return proto_rows_to_arrow_table


def _with_storage_error_codes(orig):
    """_error_response, with the StorageError BigQuery attaches to a schema mismatch."""

    def error_response(stream_name, detail, status_code=grpc.StatusCode.INVALID_ARGUMENT):
        from google.cloud.bigquery_storage_v1 import types

        if detail.startswith(EXTRA_FIELDS):
            code = types.StorageError.StorageErrorCode.SCHEMA_MISMATCH_EXTRA_FIELDS
            st = _storage_error_status(grpc.StatusCode.INVALID_ARGUMENT, f"{detail} Entity: {stream_name}", code, stream_name)
            return _response_with_status(stream_name, st)
        return orig(stream_name, detail, status_code)

    return error_response


def _start_fault_server():
    port = int(os.environ.get("FLEXRUN_BQ_FAULT_PORT", "0") or 0)
    if port:
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), _FaultServer)
        threading.Thread(target=srv.serve_forever, name="flexrun-faults", daemon=True).start()


from bqemulator.catalog.duckdb_repository import DuckDBCatalogRepository  # noqa: E402
from bqemulator.catalog.memory_repository import MemoryCatalogRepository  # noqa: E402

from bqemulator.api.routes import tables as tables_routes  # noqa: E402
from bqemulator.api.routes import jobs as jobs_routes  # noqa: E402

for owner, name in [
    (tables_routes, "_rest_to_table_meta"),
    (tables_routes, "_table_to_rest"),
    (write_servicer, "proto_rows_to_arrow_table"),
    (DuckDBCatalogRepository, "update_table"),
    (MemoryCatalogRepository, "update_table"),
    (snapshots.SnapshotManager, "record_change"),
    (write_servicer, "_table_arrow_schema"),
    (write_servicer.BigQueryWriteHandler, "_perform_append"),
    (write_servicer.BigQueryWriteHandler, "_flush_to_target"),
    (write_servicer, "select_strategy"),
    (write_servicer, "AppendStatus"),
    (write_servicer, "_error_response"),
    (write_servicer, "_ok_response"),
    (write_servicer, "_proto_to_grpc_status"),
    (write_servicer, "_oversize_error_response"),
    (write_servicer, "quoted_table_ref"),
    (write_servicer, "register_name"),
    (write_servicer.BigQueryWriteHandler, "_handle_create_write_stream"),
    (write_servicer.BigQueryWriteHandler, "_handle_get_write_stream"),
    (write_servicer.BigQueryWriteHandler, "_handle_append_rows"),
    (write_servicer.BigQueryWriteHandler, "manager"),
    (write_servicer.BigQueryWriteHandler, "_bind_stream_to_target"),
    (write_servicer.BigQueryWriteHandler, "_ensure_stream_bound"),
    (jobs_routes, "query"),
]:
    if not hasattr(owner, name):
        sys.exit(f"bqemulator_launcher: {owner.__name__}.{name} not found; this launcher is written for bqemulator 1.4.0")

_original_aio_server = grpc.aio.server


def _aio_server_with_threads(*args, **kwargs):
    threads = int(os.environ.get("FLEXRUN_BQ_GRPC_THREADS", "128"))
    kwargs.setdefault("migration_thread_pool", concurrent.futures.ThreadPoolExecutor(max_workers=threads))
    return _original_aio_server(*args, **kwargs)


_QUERY_ERROR_STATUS = {"notFound": (404, "NOT_FOUND"), "accessDenied": (403, "PERMISSION_DENIED"), "duplicate": (409, "ALREADY_EXISTS")}


def _failing_queries_with_status(orig):
    """Patch 12: a failed jobs.query answers with its HTTP status and Google's envelope."""
    import functools

    from fastapi.responses import JSONResponse

    @functools.wraps(orig)
    async def query(*args, **kwargs):
        body = await orig(*args, **kwargs)
        errors = body.get("errors") if isinstance(body, dict) else None
        if not (errors and body.get("jobComplete") and not body.get("rows")):
            return body
        first = errors[0]
        reason = first.get("reason", "invalidQuery")
        code, status = _QUERY_ERROR_STATUS.get(reason, (400, "INVALID_ARGUMENT"))
        message = first.get("message", "")
        detail = {"message": message, "domain": "global", "reason": reason}
        return JSONResponse(
            status_code=code,
            content={"error": {"code": code, "message": message, "errors": [detail], "status": status}},
        )

    return query


# Patch 14: BigQuery's limit on table metadata updates. https://cloud.google.com/bigquery/quotas,
# "Maximum rate of table metadata update operations per table: 5 operations per 10
# seconds" (tables.patch and tables.update among them), answered, per
# https://cloud.google.com/bigquery/docs/troubleshoot-quotas, with "Exceeded rate limits:
# too many table update operations for this table" and the reason rateLimitExceeded,
# HTTP 403. Stock bqemulator has no limit, so several shards widening one table at once
# never met it here.
TABLE_UPDATES_PER_WINDOW = 5
TABLE_UPDATE_WINDOW_S = 10.0
_TABLE_UPDATES = {}


def _over_update_rate(table):
    """Whether `table` has had 5 updates in the last 10 s (a 6th would be over the rate)."""
    now = time.monotonic()
    with FAULTS.lock:
        recent = [t for t in _TABLE_UPDATES.get(table, []) if now - t < TABLE_UPDATE_WINDOW_S]
        _TABLE_UPDATES[table] = recent
        return len(recent) >= TABLE_UPDATES_PER_WINDOW


def _count_update(table, response):
    """Count an update that changed `table` (a refused one changed nothing)."""
    if getattr(response, "status_code", 200) < 300:
        with FAULTS.lock:
            _TABLE_UPDATES.setdefault(table, []).append(time.monotonic())
    return response


def _error(status, code_name, reason, message):
    from fastapi.responses import JSONResponse

    detail = {"message": message, "domain": "global", "reason": reason}
    return JSONResponse(
        status_code=status,
        content={"error": {"code": status, "message": message, "errors": [detail], "status": code_name}},
    )


def _rest_fault(kwargs, patch=False):
    """The 503 a test asked for on this table's next REST call (item 9), or for a
    tables.patch the 403 rateLimitExceeded of an update over BigQuery's rate (patch 14,
    or asked for), or None."""
    table = f"{kwargs.get('dataset_id')}.{kwargs.get('table_id')}"
    with FAULTS.lock:
        f = FAULTS.tables.get(table)
        fail = f is not None and f.rest_unavailable > 0
        if fail:
            f.rest_unavailable -= 1
        limited = patch and f is not None and f.rest_rate_limited > 0
        if limited:
            f.rest_rate_limited -= 1
    if fail:
        FAULTS.count("injected_rest", table=table)
        return _error(503, "UNAVAILABLE", "backendError", "injected fault (backendError) from the flexrun launcher")
    if patch and (limited or _over_update_rate(table)):
        FAULTS.count("rate_limited_patches", table=table)
        return _error(
            403,
            "PERMISSION_DENIED",
            "rateLimitExceeded",
            "Exceeded rate limits: too many table update operations for this table. For more information, see https://cloud.google.com/bigquery/docs/troubleshoot-quotas",
        )
    return None


def _failing_table_calls(orig, patch):
    """A tables.get/patch endpoint that answers 503 while a test asked for it, and a
    tables.patch past BigQuery's update rate 403; sync or async as the stock endpoint is
    (FastAPI runs a sync one in its thread pool)."""
    import functools
    import inspect

    def table(kwargs):
        return f"{kwargs.get('dataset_id')}.{kwargs.get('table_id')}"

    if inspect.iscoroutinefunction(orig):
        @functools.wraps(orig)
        async def call(*args, **kwargs):
            fault = _rest_fault(kwargs, patch)
            if fault:
                return fault
            response = await orig(*args, **kwargs)
            return _count_update(table(kwargs), response) if patch else response
    else:
        @functools.wraps(orig)
        def call(*args, **kwargs):
            fault = _rest_fault(kwargs, patch)
            if fault:
                return fault
            response = orig(*args, **kwargs)
            return _count_update(table(kwargs), response) if patch else response

    return call


def _patch_table_routes():
    found = 0
    for route in tables_routes.router.routes:
        if route.path.endswith("/tables/{table_id}") and ({"GET", "PATCH", "PUT"} & set(route.methods)):
            route.endpoint = _failing_table_calls(route.endpoint, bool({"PATCH", "PUT"} & set(route.methods)))
            found += 1
    if found < 2:
        sys.exit("bqemulator_launcher: the tables.get/patch routes were not found; this launcher is written for bqemulator 1.4.0")


def _patch_query_route():
    for route in jobs_routes.router.routes:
        if route.path.endswith("/projects/{project_id}/queries") and "POST" in route.methods:
            route.endpoint = _failing_queries_with_status(route.endpoint)
            return
    sys.exit("bqemulator_launcher: the jobs.query route was not found; this launcher is written for bqemulator 1.4.0")


grpc.aio.server = _aio_server_with_threads
_patch_query_route()
_patch_table_routes()
snapshots.SnapshotManager.record_change = _record_change_without_snapshot
write_servicer._table_arrow_schema = _table_arrow_schema_with_nested_fields
write_servicer.BigQueryWriteHandler._perform_append = _atomic_perform_append
write_servicer.BigQueryWriteHandler._flush_to_target = _flush_to_target
write_servicer._oversize_error_response = _oversize_invalid_argument
write_servicer.BigQueryWriteHandler.__init__ = _init
write_servicer.BigQueryWriteHandler._handle_create_write_stream = _create
write_servicer.BigQueryWriteHandler._handle_get_write_stream = _get
write_servicer.BigQueryWriteHandler._handle_append_rows = _append
tables_routes._rest_to_table_meta = _checking_schema_updates(
    _keeping_constraints(_checking_layout(tables_routes._rest_to_table_meta))
)
tables_routes._table_to_rest = _showing_constraints(tables_routes._table_to_rest)
write_servicer.proto_rows_to_arrow_table = _refusing_extra_fields(
    _with_change_columns(write_servicer.proto_rows_to_arrow_table)
)
write_servicer._error_response = _with_storage_error_codes(write_servicer._error_response)
write_servicer.BigQueryWriteHandler._bind_stream_to_target = _bind_stream_to_target
write_servicer.BigQueryWriteHandler._ensure_stream_bound = _ensure_stream_bound
for _repo in (DuckDBCatalogRepository, MemoryCatalogRepository):
    _repo.update_table = _adding_columns(_repo.update_table)
_start_fault_server()

from bqemulator.cli import main  # noqa: E402  (import after the patches)

if __name__ == "__main__":
    sys.argv[0] = "bqemulator"
    sys.exit(main())
