"""Start bqemulator with time-travel snapshots turned off.

Stock bqemulator 1.4.0 copies the whole table on every committed append (for
time travel) and keeps the copies, so appends get slower as the table grows
(19.6k -> 4.0k rows/s over 100k rows, 5.6 GiB). flexrun never uses time
travel, so this launcher replaces `SnapshotManager.record_change` with a
version that only publishes the change event, then runs the normal CLI.
Everything else (REST, gRPC Storage Write, DuckDB storage) is unchanged.
"""
import sys

from bqemulator.versioning import snapshots


def _record_change_without_snapshot(self, project_id, dataset_id, table_id):
    self._events.publish(snapshots.TableDataChanged(project_id, dataset_id, table_id))
    return None


snapshots.SnapshotManager.record_change = _record_change_without_snapshot

from bqemulator.cli import main  # noqa: E402  (import after the patch)

if __name__ == "__main__":
    sys.argv[0] = "bqemulator"
    sys.exit(main())
