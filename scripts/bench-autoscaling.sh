#!/usr/bin/env bash
# The load-step scenario for both autoscaling policies on the real stack.
#
#   scripts/bench-autoscaling.sh
#
# For each policy (ds2, dataflow): a kafka-to-bq job (exactly-once, 8 partitions)
# with workers of an emulated 2 MB/s capacity, hint 0.8, a decision every 3 s, and a
# generator stepping 2 MB/s (15 s) -> 10 MB/s (30 s) -> 2 MB/s (30 s) of ~1 KB
# messages. The Dataflow policy's waits (2 min and so on) are divided by 12 to fit.
# Prints every decision (time, workers before -> after, rationale), how many
# changes it took to reach the peak, and the row count (exactly-once check).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/build-deps.sh
cargo build --release --bin flexrun >&2
F=target/release/flexrun
bash scripts/stack.sh start bench >&2
eval "$(bash scripts/stack.sh env bench)"
OUT=$(mktemp -d)
for s in 0 30000 330000; do
  printf '{"id": {{index(%s)}}, "logStreamId": {{integer(1000001,2000000)}}, "message": "{{alphaNumeric(962)}}"}' "$s" >"$OUT/s$s.json"
done
for policy in ds2 dataflow; do
  T=scale_${policy}_$(date +%s)
  $F local create-topic --topic "$T" --partitions 8 >&2
  $F local create-table --table "$FLEXRUN_BQ_PROJECT:bench.$T" >&2
  FLEXRUN_LOG=warn $F --template kafka-to-bq --job-name "$T" --checkpoint-dir "$OUT/ck" --idle-timeout 6s \
    --worker-capacity 2MB/s --autoscaling-policy "$policy" --autoscaling-interval 3s --autoscaling-time-scale 12 \
    --summary-json "$OUT/$policy.json" \
    --parameters "readBootstrapServerAndTopic=$FLEXRUN_KAFKA;$T,messageFormat=JSON,outputTableSpec=$FLEXRUN_BQ_PROJECT:bench.$T,kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest" \
    >"$OUT/$policy.out" 2>&1 &
  JOB=$!
  G="$F --template streaming-data-generator --parameters sinkType=KAFKA,bootstrapServer=$FLEXRUN_KAFKA,kafkaTopic=$T"
  $G,qps=2000,messagesLimit=30000,schemaLocation=$OUT/s0.json >&2
  $G,qps=10000,messagesLimit=300000,schemaLocation=$OUT/s30000.json >&2
  $G,qps=2000,messagesLimit=60000,schemaLocation=$OUT/s330000.json >&2
  wait $JOB
  echo "== $policy: $($F local count --table "$FLEXRUN_BQ_PROJECT:bench.$T" --distinct id) (390000 produced)"
  python3 - "$OUT/$policy.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
ch = [d for d in j["decisions"] if d["from"] != d["to"]]
peak = max([d["to"] for d in ch] or [1])
to_peak = next(i for i, d in enumerate(ch) if d["to"] == peak) + 1 if ch else 0
print(f"{'time s':>7}  {'workers':>9}  rationale")
for d in j["decisions"]:
    print(f"{d['time_s']:>7.1f}  {d['from']:>3} -> {d['to']:<3}  {d['rationale']}")
print(f"changes: {len(ch)}; peak {peak} workers reached in {to_peak} change(s); workers at the end: {j['workers']}")
PY
done
