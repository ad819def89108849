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

4. Enough gRPC threads. `grpc.aio` runs bqemulator's synchronous handlers on a
   default pool of min(32, cores + 4) threads (6 on a 2-core machine), and every open
   AppendRows stream holds one for its lifetime: a job with 8 shards starved. The
   pool is raised to FLEXRUN_BQ_GRPC_THREADS (default 128).

Each patch checks that the code it replaces is still there, so a different
bqemulator version fails loudly instead of running unpatched.
"""
import concurrent.futures
import os
import sys

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


def _atomic_perform_append(self, bound_stream, rows_table, offset, max_buffered_rows):
    """bqemulator 1.4.0's `_perform_append`, with the offset restored if the insert fails."""
    ws = write_servicer
    strategy = ws.select_strategy(bound_stream.stream_type)
    with bound_stream.lock:
        before = (bound_stream.next_offset, bound_stream.row_count)
        outcome = strategy.append(bound_stream, rows_table, offset, max_buffered_rows=max_buffered_rows)
        if outcome.status is not ws.AppendStatus.OK:
            return ws._error_response(bound_stream.name, outcome.detail, status_code=ws._proto_to_grpc_status(outcome.status))
        if outcome.committed_rows is not None and outcome.committed_rows.num_rows > 0:
            try:
                self._flush_to_target(bound_stream, outcome.committed_rows)
            except Exception:
                bound_stream.next_offset, bound_stream.row_count = before
                raise
    return ws._ok_response(bound_stream.name, outcome)


for owner, name in [
    (snapshots.SnapshotManager, "record_change"),
    (write_servicer, "_table_arrow_schema"),
    (write_servicer.BigQueryWriteHandler, "_perform_append"),
    (write_servicer.BigQueryWriteHandler, "_flush_to_target"),
    (write_servicer, "select_strategy"),
    (write_servicer, "AppendStatus"),
    (write_servicer, "_error_response"),
    (write_servicer, "_ok_response"),
    (write_servicer, "_proto_to_grpc_status"),
]:
    if not hasattr(owner, name):
        sys.exit(f"bqemulator_launcher: {owner.__name__}.{name} not found; this launcher is written for bqemulator 1.4.0")

_original_aio_server = grpc.aio.server


def _aio_server_with_threads(*args, **kwargs):
    threads = int(os.environ.get("FLEXRUN_BQ_GRPC_THREADS", "128"))
    kwargs.setdefault("migration_thread_pool", concurrent.futures.ThreadPoolExecutor(max_workers=threads))
    return _original_aio_server(*args, **kwargs)


grpc.aio.server = _aio_server_with_threads
snapshots.SnapshotManager.record_change = _record_change_without_snapshot
write_servicer._table_arrow_schema = _table_arrow_schema_with_nested_fields
write_servicer.BigQueryWriteHandler._perform_append = _atomic_perform_append

from bqemulator.cli import main  # noqa: E402  (import after the patches)

if __name__ == "__main__":
    sys.argv[0] = "bqemulator"
    sys.exit(main())
