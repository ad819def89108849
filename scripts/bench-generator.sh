#!/usr/bin/env bash
# streaming-data-generator speed for the seed schema
# ({"logStreamId":"{{integer(1000001,2000000)}}","message":"{{alphaNumeric(962)}}"}).
#
#   scripts/bench-generator.sh [MESSAGES]        (default 5000000 for the null sink)
#
# Runs 1) the null sink (the generator alone; one generating thread) and 2) the
# local broker (the 'bench' stack, 8 partitions, a tenth of MESSAGES), each with a
# target rate far above what can be reached, and prints messages/s achieved and
# messages per CPU-second of the flexrun process (getrusage), i.e. per core.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${1:-5000000}
bash scripts/build-deps.sh
cargo build --release --bin flexrun >&2
F=target/release/flexrun
OUT=$(mktemp -d)
printf '%s' '{"logStreamId":"{{integer(1000001,2000000)}}","message":"{{alphaNumeric(962)}}"}' >"$OUT/seed.json"

$F --template streaming-data-generator --seed 1 --summary-json "$OUT/null.json" \
  --parameters "qps=1000000000,schemaLocation=$OUT/seed.json,sinkType=NULL,messagesLimit=$N" >&2

bash scripts/stack.sh start bench >&2
eval "$(bash scripts/stack.sh env bench)"
TOPIC=genbench_$(date +%s)
$F local create-topic --topic "$TOPIC" --partitions 8 >&2
$F --template streaming-data-generator --seed 1 --summary-json "$OUT/kafka.json" \
  --parameters "qps=1000000000,schemaLocation=$OUT/seed.json,sinkType=KAFKA,bootstrapServer=$FLEXRUN_KAFKA,kafkaTopic=$TOPIC,messagesLimit=$((N / 10))" >&2

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print(f"streaming-data-generator, seed schema (~1 KB messages), this machine ({os.cpu_count()} cores)")
print(f"{'sink':<8} {'messages':>9} {'wall s':>7} {'msg/s':>10} {'CPU s':>7} {'msg per CPU-s':>14}")
for name in ["null", "kafka"]:
    r = json.load(open(os.path.join(out, name + ".json")))
    # For Kafka the rate counts acknowledged messages, including the final flush.
    rate = r.get("delivered_qps") or r["achieved_qps"]
    wall = r["sent"] / rate
    print(f"{name:<8} {r['sent']:>9} {wall:>7.2f} {rate:>10.0f} {r['cpu_s']:>7.2f} {r['sent']/r['cpu_s']:>14.0f}")
PY
