#!/usr/bin/env bash
# kafka-to-bq throughput and CPU cost on this machine, for the seed's message shape
# ({"logStreamId": int, "message": 962 alphanumeric chars}, about 1 KB).
#
#   scripts/bench-kafka-to-bq.sh [MESSAGES]      (default 200000)
#
# Starts the 'bench' stack, produces MESSAGES messages to an 8-partition topic, then
# reads the whole topic four times with fresh job names:
#   exactly-once  -> BigQuery emulator      at-least-once -> BigQuery emulator
#   exactly-once  -> stats sink             at-least-once -> stats sink
# The stats sink maps and encodes every row exactly as for BigQuery (and keeps the
# offset and commit logs) but does not send it, so it measures the runner itself.
# Prints one table: msg/s and MB/s over the active window (first read to last
# commit) and the runner's CPU-seconds per GB of message bytes (getrusage of the
# flexrun process). Latency is not reported here: the messages are produced before
# the job starts, so end-to-end latency would measure the wait in Kafka.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${1:-200000}
bash scripts/build-deps.sh
cargo build --release --bin flexrun >&2
F=target/release/flexrun
bash scripts/stack.sh start bench >&2
eval "$(bash scripts/stack.sh env bench)"
ID=$(date +%s)
TOPIC=bench_$ID
OUT=$(mktemp -d)
$F local create-topic --topic "$TOPIC" --partitions 8 >&2
$F local produce --topic "$TOPIC" --count "$N" --seed-shape >&2

run() { # name delivery-param sink-flags...
  local name=$1 extra=$2
  shift 2
  local table=$FLEXRUN_BQ_PROJECT:bench.${name//-/_}_$ID
  if [ "$*" = "" ]; then
    $F local create-table --table "$table" --schema-file scripts/bench/seed-schema.json >&2
  fi
  FLEXRUN_LOG=warn $F --template kafka-to-bq --job-name "bench-$name-$ID" --checkpoint-dir "$OUT/ck" --idle-timeout 3s \
    --summary-json "$OUT/$name.json" "$@" \
    --parameters "readBootstrapServerAndTopic=$FLEXRUN_KAFKA;$TOPIC,messageFormat=JSON,kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,outputTableSpec=$table$extra" >&2
}

run eo-bigquery ""
run alo-bigquery ",useStorageWriteApiAtLeastOnce=true"
run eo-stats "" --sink stats --schema-file scripts/bench/seed-schema.json
run alo-stats ",useStorageWriteApiAtLeastOnce=true" --sink stats --schema-file scripts/bench/seed-schema.json

python3 - "$OUT" "$N" <<'PY'
import json, sys, os
out, n = sys.argv[1], int(sys.argv[2])
print(f"kafka-to-bq, {n} messages of the seed shape, 8 partitions, this machine ({os.cpu_count()} cores)")
print(f"{'run':<14} {'messages':>9} {'active s':>9} {'msg/s':>8} {'MB/s':>7} {'CPU s':>7} {'CPU-s/GB':>9}")
for name in ["eo-bigquery", "alo-bigquery", "eo-stats", "alo-stats"]:
    j = json.load(open(os.path.join(out, name + ".json")))
    s = j["summary"]
    act = s["active_s"] or j["elapsed_s"]
    cpu = s["cpu_user_s"] + s["cpu_sys_s"]
    gb = s["bytes_read"] / 1e9
    print(f"{name:<14} {s['messages_read']:>9} {act:>9.2f} {s['messages_read']/act:>8.0f} {s['bytes_read']/act/1e6:>7.2f} {cpu:>7.2f} {cpu/gb if gb else 0:>9.2f}")
PY
