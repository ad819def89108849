#!/usr/bin/env bash
# End-to-end latency of kafka-to-bq exactly-once on the local stack (issue 48): the seed's
# message shape ({"logStreamId": int, "message": 962 alphanumeric chars}) produced by
# streaming-data-generator at RATE msg/s for SECONDS while the job runs, into the BigQuery
# emulator, one Apache Kafka broker with its durable defaults (acks=all producer).
#
#   scripts/bench-latency.sh [RATE] [SECONDS] [TRIGGER]
#   (defaults: 5000 msg/s for 60 s; TRIGGER is storageWriteApiTriggeringFrequencySec, the
#    longest a batch is held, default the template's 5 s)
#
# End-to-end is each record's Kafka timestamp (its creation by the generator) to the
# moment BigQuery acknowledged its batch (the job's `end_to_end` stage, hdrhistogram at 3
# significant digits). The first 5 s of the run are inside the figures. Prints p50, p95,
# p99 and max of every stage from the job's summary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RATE=${1:-5000}
SECS=${2:-60}
TRIGGER=${3:-5}
bash scripts/build-deps.sh
cargo build --release --bin flexrun >&2
F=target/release/flexrun
bash scripts/stack.sh start bench >&2
eval "$(bash scripts/stack.sh env bench)"
ID=$(date +%s)
TOPIC=latency_$ID
TABLE=$FLEXRUN_BQ_PROJECT:bench.latency_$ID
OUT=$(mktemp -d)
$F local create-topic --topic "$TOPIC" --partitions 8 >&2
$F local create-table --table "$TABLE" --schema-file scripts/bench/seed-schema.json >&2
FLEXRUN_LOG=warn $F --template kafka-to-bq --job-name "latency-$ID" --checkpoint-dir "$OUT/ck" --idle-timeout 5s \
  --summary-json "$OUT/job.json" \
  --parameters "readBootstrapServerAndTopic=$FLEXRUN_KAFKA;$TOPIC,messageFormat=JSON,kafkaReadAuthenticationMode=NONE,outputTableSpec=$TABLE,storageWriteApiTriggeringFrequencySec=$TRIGGER" >&2 &
JOB=$!
# The job reads at latest (the template's default): wait until it has saved its starts.
for _ in $(seq 1 300); do [ -f "$OUT/ck/latency-$ID/starts.json" ] && break; sleep 0.1; done
$F --template streaming-data-generator --seed 7 \
  --parameters "qps=$RATE,schemaLocation=scripts/bench/seed-template.json,sinkType=KAFKA,bootstrapServer=$FLEXRUN_KAFKA,kafkaTopic=$TOPIC,outputType=JSON,messagesLimit=$((RATE * SECS))" >&2
wait $JOB
python3 - "$OUT/job.json" "$RATE" "$SECS" "$TRIGGER" <<'PY'
import json, sys, os
j = json.load(open(sys.argv[1]))
s = j["summary"]
print(f"kafka-to-bq exactly-once, {sys.argv[2]} msg/s of the seed shape for {sys.argv[3]} s, storageWriteApiTriggeringFrequencySec={sys.argv[4]}, 8 partitions, one Kafka broker, this machine ({os.cpu_count()} cores)")
print(f"messages read {s['messages_read']}, rows written {s['rows_written']}")
print(f"{'stage':<11} {'count':>9} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}")
for st in s["stages"][:4]:
    print(f"{st['stage']:<11} {st['count']:>9} {st['p50_ms']:>8.1f} {st['p95_ms']:>8.1f} {st['p99_ms']:>8.1f} {st['max_ms']:>8.1f}")
PY
