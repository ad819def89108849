#!/usr/bin/env bash
# Wall time to simulate 24 h of Google's benchmark setup (seed 001): 1,000,000 msg/s of
# 1 KiB (976.6 MiB/s), 1,000 partitions, e2-standard-2, at most 120 workers, 400 Storage Write streams.
#
#   scripts/bench-simulate.sh [RUNS]        (default 5 runs per mode)
#
# Prints, per mode, the median and the range of the wall time of the whole
# `flexrun simulate` process (parse, simulate, report), and the simulated result next to
# the published one. Goal: ≤ 2 s for 24 h.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=${1:-5}
bash scripts/build-deps.sh
cargo build --release --bin flexrun >&2
BIN=target/release/flexrun
ARGS=(simulate --rate 1GiB/s --message-size 1KiB --partitions 1000 --max-workers 120
      --worker-machine-type e2-standard-2 --duration 24h --parameters numStorageWriteApiStreams=400 --format json)
printf '%-14s %6s %10s %10s %10s %9s %8s %22s\n' mode runs "median s" "min s" "max s" workers CPU "latency p50/p95/p99 ms"
for mode in exactly-once at-least-once; do
  extra=()
  [ "$mode" = at-least-once ] && extra=(--additional-experiments streaming_mode_at_least_once)
  times=()
  for _ in $(seq 1 "$RUNS"); do
    start=$(date +%s.%N)
    "$BIN" "${ARGS[@]}" "${extra[@]}" > /tmp/flexrun-bench-sim.json 2>/dev/null
    end=$(date +%s.%N)
    times+=("$(echo "$end - $start" | bc -l)")
  done
  python3 - "$mode" "$RUNS" "${times[@]}" <<'PY'
import json, statistics, sys
mode, runs, times = sys.argv[1], sys.argv[2], [float(t) for t in sys.argv[3:]]
s = json.load(open("/tmp/flexrun-bench-sim.json"))["summary"]
lat = "/".join(f"{v:.0f}" for v in s["latency_ms"])
print(f"{mode:<14} {runs:>6} {statistics.median(times):>10.3f} {min(times):>10.3f} {max(times):>10.3f} {s['workers_mean']:>9.1f} {s['mean_cpu']*100:>7.1f}% {lat:>22}")
PY
done
echo "published (Google, n=3): exactly-once 63 workers, 70% CPU, 1200/3000/5400 ms; at-least-once 53 workers, 75% CPU"
