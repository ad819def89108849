#!/usr/bin/env bash
# The transform's CPU cost per message format (issue 14): the same generated documents
# mapped to rows as JSON, as Avro (Confluent wire format) and as JSON through a
# JavaScript UDF, by runner/examples/format_cost.rs. No services are needed.
#
#   scripts/bench-formats.sh [MESSAGES] [ROUNDS]     (defaults 100000, 5)
#
# Prints, per shape and format, the median over ROUNDS of the time to map every message
# (one thread, so wall time is CPU time), as microseconds per message and CPU-seconds per
# GB of message bytes, and the ratio to JSON of the same shape. Avro messages are smaller
# than the same documents in JSON, so per GB and per message tell different stories;
# both are shown.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${1:-100000}
ROUNDS=${2:-5}
bash scripts/build-deps.sh
cargo build --release --example format_cost >&2
"${CARGO_TARGET_DIR:-target}"/release/examples/format_cost "$N" "$ROUNDS" | python3 -c '
import sys, statistics
runs = {}
for line in sys.stdin:
    shape, fmt, _, n, b, s = line.split("\t")
    runs.setdefault((shape, fmt), []).append((int(n), int(b), float(s)))
print("| shape | format | bytes/msg | us/msg (median) | CPU-s/GB | per msg vs JSON | per GB vs JSON |")
print("|---|---|---|---|---|---|---|")
for (shape, fmt), rs in runs.items():
    n, b, _ = rs[0]
    s = statistics.median(r[2] for r in rs)
    jn, jb, _ = runs[(shape, "json")][0]
    js = statistics.median(r[2] for r in runs[(shape, "json")])
    per_gb, j_per_gb = s / (b / 1e9), js / (jb / 1e9)
    print(f"| {shape} | {fmt} | {b / n:.0f} | {s / n * 1e6:.2f} | {per_gb:.1f} | {s / js:.2f}x | {per_gb / j_per_gb:.2f}x |")
'
