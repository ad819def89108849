#!/usr/bin/env bash
# Seed 002's benchmark: publish one window of FILES files (SIZE bytes each) with
# kafka-to-gcs's committer, serially and with 4, 16 and 64 requests in flight, to the
# Cloud Storage emulator and to the local disk. Each run publishes into an empty
# directory, then over its own files under other names (the trash step: N deletes, then
# N renames), as Spark's commitJob / trashFiles / moveFiles do when overwriting.
#
#   scripts/bench-commit.sh [FILES] [SIZE] [LATENCY_MS]     (defaults 5000 65536 20)
#
# Three stores:
#   disk          the local file system: rename(2), as HDFS's metadata-only rename.
#   gcs-emulator  gcp-storage-emulator as the stack runs it: every call in-process,
#                 no network; the emulator handles one call at a time.
#   gcs-latency   the same emulator with LATENCY_MS added to each request before it is
#                 handled (scripts/gcs_emulator_launcher.py --latency-ms), outside its
#                 lock: a model of a remote service's round trip, which parallel
#                 requests overlap. The figure is an assumption, not Google's.
#
# Prints one table; writes bench-out/commit.csv and bench-out/commit-<store>.svg.
# Goal (issue 15): parallel commit of 5,000 files to the object store >= 10x serial.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FILES=${1:-5000}
SIZE=${2:-65536}
LATENCY=${3:-20}
mkdir -p bench-out
bash scripts/build-deps.sh
cargo build --release --example commit_bench >&2
BIN=target/release/examples/commit_bench
PY=$(bash scripts/stack.sh gcs-python)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
"$PY" scripts/gcs_emulator_launcher.py --port 39023 --bucket bench >bench-out/gcs-0.log 2>&1 &
pids+=($!)
"$PY" scripts/gcs_emulator_launcher.py --port 39024 --bucket bench --latency-ms "$LATENCY" >bench-out/gcs-l.log 2>&1 &
pids+=($!)
sleep 2
DISK=$(mktemp -d)
run() { # label endpoint output
  STORAGE_EMULATOR_HOST=$2 "$BIN" --output "$3" --files "$FILES" --size "$SIZE" \
    --parallelism 1,4,16,64 --label "$1" --csv "bench-out/commit-$1.csv" --svg "bench-out/commit-$1.svg"
}
echo "files: $FILES of $SIZE bytes; modelled latency for gcs-latency: $LATENCY ms per request"
run disk "" "$DISK/"
run gcs-emulator 127.0.0.1:39023 gs://bench/run/ | tail -n +2
run gcs-latency 127.0.0.1:39024 gs://bench/run/ | tail -n +2
rm -rf "$DISK"
{ head -1 bench-out/commit-disk.csv; for s in disk gcs-emulator gcs-latency; do tail -n +2 "bench-out/commit-$s.csv"; done; } >bench-out/commit.csv
python3 - <<'PY'
import csv
rows = list(csv.DictReader(open("bench-out/commit.csv")))
by = {(r["store"], int(r["parallelism"])): float(r["publish_overwrite_s"]) for r in rows}
for p in (1, 64):
    d, g, l = by.get(("disk", p)), by.get(("gcs-emulator", p)), by.get(("gcs-latency", p))
    if d and g and l:
        print(f"parallelism {p:>2}: object store / disk = {g / d:.1f}x (emulator), {l / d:.1f}x (with latency)")
s, p = by.get(("gcs-latency", 1)), by.get(("gcs-latency", 64))
if s and p:
    print(f"gcs-latency: parallel (64) vs serial: {s / p:.1f}x faster (goal >= 10x)")
PY
