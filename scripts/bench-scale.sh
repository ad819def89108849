#!/usr/bin/env bash
# kafka-to-bq's cost against partition count and backlog (issue 63): CPU per GB, peak
# RSS, threads and open file descriptors, with the 8-partition row as the reference.
#
#   scripts/bench-scale.sh [MESSAGES] [ROUNDS]      (defaults 200000, 1)
#   LAYOUTS="8:8 100:100 1000:400 4000:400" scripts/bench-scale.sh   partitions:streams
#   BACKLOG10=1 scripts/bench-scale.sh              also 10x MESSAGES at 1,000 partitions
#   OLD_BIN=path/to/older/flexrun scripts/bench-scale.sh   the same rows with that binary
#   BUDGET=512MiB scripts/bench-scale.sh            --memory-budget of every run (default 1GiB)
#
# Starts the 'bench' stack. For each layout it creates a topic of that many partitions,
# produces MESSAGES seed-shape messages (round-robin over the partitions) and runs
# kafka-to-bq exactly-once with the stats sink (parse, map, encode, the progress journal;
# no BigQuery) from the earliest offset, with numStorageWriteApiStreams as the layout
# says (the seed's command has 1,000 partitions and 400 streams). While a run lasts,
# /proc/<pid> is sampled every 100 ms for threads and open fds (the maximum is kept);
# CPU is getrusage up to the last commit (`cpu_to_last_commit_s`), over the bytes read;
# peak RSS is the summary's `peak_rss_bytes` (ru_maxrss). Medians over ROUNDS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${1:-200000}
ROUNDS=${2:-1}
LAYOUTS=${LAYOUTS:-"8:8 100:100 1000:400 4000:400"}
BUDGET=${BUDGET:-1GiB}
bash scripts/build-deps.sh
cargo build --release --bin flexrun >&2
F=${CARGO_TARGET_DIR:-target}/release/flexrun
bash scripts/stack.sh start bench >&2
eval "$(bash scripts/stack.sh env bench)"
ID=$(date +%s)
OUT=$(mktemp -d)
mkdir -p target/bench

# Run kafka-to-bq on a topic, sampling its threads and fds; writes $OUT/<name>.json and
# $OUT/<name>.proc (max threads, max fds).
run() { # name binary topic streams
  local name=$1 bin=$2 topic=$3 streams=$4 budget=()
  if "$bin" --help 2>/dev/null | grep -q -- --memory-budget; then budget=(--memory-budget "$BUDGET"); fi
  FLEXRUN_LOG=warn "$bin" --template kafka-to-bq --job-name "scale-$name-$ID" --checkpoint-dir "$OUT/ck" \
    --idle-timeout 2s --stop-when-caught-up --sink stats --schema-file scripts/bench/seed-schema.json "${budget[@]}" \
    --summary-json "$OUT/$name.json" \
    --parameters "readBootstrapServerAndTopic=$FLEXRUN_KAFKA;$topic,messageFormat=JSON,kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,outputTableSpec=p:d.t,numStorageWriteApiStreams=$streams" >&2 &
  local pid=$! threads=0 fds=0
  while kill -0 "$pid" 2>/dev/null; do
    t=$(awk '/^Threads:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    f=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l || echo 0)
    [ "${t:-0}" -gt "$threads" ] && threads=$t
    [ "${f:-0}" -gt "$fds" ] && fds=$f
    sleep 0.1
  done
  wait "$pid"
  echo "$threads $fds" > "$OUT/$name.proc"
}

ROWS=()
for layout in $LAYOUTS; do
  p=${layout%%:*} s=${layout##*:}
  sizes=("$N")
  if [ "${BACKLOG10:-0}" = 1 ] && [ "$p" = 1000 ]; then sizes+=($((N * 10))); fi
  for n in "${sizes[@]}"; do
    topic="scale_${p}_${n}_$ID"
    echo "[bench-scale] $p partitions, $s streams, $n messages" >&2
    $F local create-topic --topic "$topic" --partitions "$p" >&2
    $F local produce --topic "$topic" --count "$n" --seed-shape >&2
    for r in $(seq 1 "$ROUNDS"); do
      run "new-$p-$n-$r" "$F" "$topic" "$s"
      if [ -n "${OLD_BIN:-}" ]; then run "old-$p-$n-$r" "$OLD_BIN" "$topic" "$s"; fi
    done
    ROWS+=("$p:$s:$n")
  done
done

python3 - "$OUT" "$ROUNDS" "$BUDGET" "${ROWS[@]}" <<'PY' | tee target/bench/scale.txt
import json, os, statistics, sys
out, rounds, budget, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def load(name):
    s = json.load(open(os.path.join(out, name + ".json")))["summary"]
    threads, fds = map(int, open(os.path.join(out, name + ".proc")).read().split())
    gb = s["bytes_read"] / 1e9
    return s["messages_read"], s["cpu_to_last_commit_s"] / gb, s.get("peak_rss_bytes", 0) / 2**20, threads, fds
bins = ["new"] + (["old"] if os.path.exists(os.path.join(out, f"old-{rows[0].split(':')[0]}-{rows[0].split(':')[2]}-1.json")) else [])
print(f"kafka-to-bq exactly-once, stats sink, seed-shape messages, {rounds} round(s), budget {budget}, {os.cpu_count()} cores")
print("| binary | partitions / streams | messages | CPU-s/GB | vs 8 partitions | peak RSS MiB | threads | open fds |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for b in bins:
    ref = None
    for row in rows:
        p, s, n = row.split(":")
        rs = [load(f"{b}-{p}-{n}-{r}") for r in range(1, rounds + 1)]
        med = lambda i: statistics.median(x[i] for x in rs)
        cpu = med(1)
        ref = ref or cpu
        short = [x[0] for x in rs if x[0] < int(n)]
        note = f" (read {short})" if short else ""
        print(f"| {b} | {p} / {s} | {int(n):,}{note} | {cpu:.2f} | {cpu / ref:.2f}x | {med(2):.0f} | {med(3):.0f} | {med(4):.0f} |")
PY
