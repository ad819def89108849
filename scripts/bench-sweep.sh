#!/usr/bin/env bash
# Wall time of a what-if sweep: 24 configurations (4 utilization hints x 3 machine types x
# 2 modes) of 24 h each at seed 001's scale (1,000,000 msg/s of 1 KiB, 1,000 partitions,
# at most 120 workers, 400 streams), simulated in parallel on every core.
#
#   scripts/bench-sweep.sh [RUNS]        (default 5)
#
# Prints the median and range of the whole process's wall time, the CPU time it used
# (user + sys, to show both cores worked), and the sweep's own table from the last run.
# Goal (issue 18): <= 5 s on this 2-core machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=${1:-5}
bash scripts/build-deps.sh
cargo build --release --bin flexrun >&2
BIN=target/release/flexrun
ARGS=(simulate --rate 1GiB/s --message-size 1KiB --partitions 1000 --max-workers 120 --duration 24h
      --parameters numStorageWriteApiStreams=400
      --sweep worker-utilization-hint=0.5,0.6,0.7,0.8
      --sweep worker-machine-type=e2-standard-2,e2-standard-4,n2-standard-4
      --sweep mode=exactly-once,at-least-once --p99-limit 6s)
walls=(); cpus=()
for _ in $(seq 1 "$RUNS"); do
  /usr/bin/time -f '%e %U %S' -o /tmp/flexrun-bench-sweep.time "$BIN" "${ARGS[@]}" > /tmp/flexrun-bench-sweep.txt 2>/dev/null
  read -r e u s < /tmp/flexrun-bench-sweep.time
  walls+=("$e"); cpus+=("$(echo "$u + $s" | bc -l)")
done
python3 - "$RUNS" "${walls[@]}" "${cpus[@]}" <<'PY'
import statistics, sys
n = int(sys.argv[1]); w = [float(x) for x in sys.argv[2:2 + n]]; c = [float(x) for x in sys.argv[2 + n:]]
print(f"{'configurations':>14} {'runs':>5} {'median wall s':>14} {'min s':>7} {'max s':>7} {'median CPU s':>13} {'CPU/wall':>9}")
print(f"{24:>14} {n:>5} {statistics.median(w):>14.2f} {min(w):>7.2f} {max(w):>7.2f} {statistics.median(c):>13.2f} {statistics.median(c) / statistics.median(w):>9.2f}")
PY
echo "goal: <= 5 s for 24 configurations of 24 h"
echo "--- the last run's table"
cat /tmp/flexrun-bench-sweep.txt
