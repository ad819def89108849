#!/usr/bin/env bash
# kafka-to-bq's CPU cost per GB beside a bare librdkafka consumer's, on the same topic
# in the same run (issue 13's target: at most 1.3x the bare consumer).
#
#   scripts/bench-hot-path.sh [MESSAGES] [ROUNDS]     (defaults 200000, 3)
#   PROFILE=1 scripts/bench-hot-path.sh               also profile one kafka-to-bq run
#
# Starts the 'bench' stack and produces MESSAGES messages of the seed's shape to an
# 8-partition topic. Each round then reads the whole topic three ways, each with a
# fresh consumer starting at the beginning:
#   bare-1    runner/examples/bare_consumer.rs: one consumer polls and counts bytes
#   bare-8    the same with 8 consumers, partition p on consumer p % 8, as kafka-to-bq's
#             8 shards read them before issue 29's step 2
#   bare-split8  one consumer whose 8 partitions are split into 8 tokio tasks' queues,
#             read through rdkafka's streams, a message at a time
#   bare-batch   one consumer read up to 256 messages per call
#             (rd_kafka_consume_batch_queue), as kafka-to-bq's shards take them now
#   bare-shards8 kafka-to-bq's own reader with no processing: one worker consumer
#             (kafka::shared) whose 8 partitions 8 tokio tasks take as 8 shards do
#   bare-shards8v the same, with a UTF-8 pass over each payload as it is taken
#   eo-stats  kafka-to-bq exactly-once, stats sink (map, encode, offset+commit logs)
#   alo-stats kafka-to-bq at-least-once, stats sink
#   eo-quoted kafka-to-bq exactly-once, stats sink, on a second topic of the same
#             messages with logStreamId quoted, as Google's generator writes it
#   eo-avro   kafka-to-bq exactly-once, stats sink, on a third topic of the same shape
#             as Avro records in Confluent wire format (scripts/bench/seed.avsc),
#             written by the generator
#   eo-proto  kafka-to-bq exactly-once, stats sink, on a fourth topic of the same shape
#             as Protobuf messages (scripts/bench/seed.proto), written by the generator
#   eo-bq     kafka-to-bq exactly-once into a table on the local BigQuery emulator
#             (the emulator's CPU is its own process's, so it is not counted)
# CPU is the process's getrusage (user+sys), start-up and kafka-to-bq's 2 s idle tail
# included; the table gives the median per way and the ratio of medians. Absolute CPU-s/GB moves a lot between machines; the ratio less.
# With OLD_BIN=path/to/an/older/flexrun, each round also runs that binary's exactly-once
# stats-sink job (eo-old), for a before/after under the same noise.
# With PROFILE=1, `perf record` samples one exactly-once run and the top symbols are
# written to target/bench/hot-path-profile.txt.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${1:-200000}
ROUNDS=${2:-3}
bash scripts/build-deps.sh
cargo build --release --bin flexrun --example bare_consumer --example bare_writer >&2
F=${CARGO_TARGET_DIR:-target}/release/flexrun
BARE=${CARGO_TARGET_DIR:-target}/release/examples/bare_consumer
bash scripts/stack.sh start bench >&2
eval "$(bash scripts/stack.sh env bench)"
ID=$(date +%s)
TOPIC=hotpath_$ID
OUT=$(mktemp -d)
mkdir -p target/bench
$F local create-topic --topic "$TOPIC" --partitions 8 >&2
$F local produce --topic "$TOPIC" --count "$N" --seed-shape >&2
$F local create-topic --topic "${TOPIC}_q" --partitions 8 >&2
$F local produce --topic "${TOPIC}_q" --count "$N" --seed-shape --quoted-id >&2
$F local create-topic --topic "${TOPIC}_a" --partitions 8 >&2
$F --template streaming-data-generator --parameters "qps=1000000,messagesLimit=$N,schemaLocation=scripts/bench/seed-template.json,sinkType=KAFKA,bootstrapServer=$FLEXRUN_KAFKA,kafkaTopic=${TOPIC}_a,outputType=AVRO,avroSchemaLocation=scripts/bench/seed.avsc" >&2
$F local create-topic --topic "${TOPIC}_p" --partitions 8 >&2
$F --template streaming-data-generator --parameters "qps=1000000,messagesLimit=$N,schemaLocation=scripts/bench/seed-template.json,sinkType=KAFKA,bootstrapServer=$FLEXRUN_KAFKA,kafkaTopic=${TOPIC}_p,outputType=PROTO,protoSchemaPath=scripts/bench/seed.proto,fullMessageName=flexrun.bench.Log" >&2

job() { # name round [extra-param] [binary] [topic] [sink]
  local name=$1 round=$2 extra=${3:-} bin=${4:-$F} topic=${5:-$TOPIC} sink=${6:-stats}
  local sinkargs=(--sink stats --schema-file scripts/bench/seed-schema.json) table=p:d.t fmt=JSON
  if [ "$sink" = avro ]; then
    fmt=AVRO_CONFLUENT_WIRE_FORMAT
    extra=",confluentAvroSchemaPath=scripts/bench/seed.avsc$extra"
  fi
  if [ "$sink" = proto ]; then
    fmt=PROTO
    extra=",protoSchemaPath=scripts/bench/seed.proto,fullMessageName=flexrun.bench.Log$extra"
  fi
  if [ "$sink" = bigquery ]; then
    table="$FLEXRUN_BQ_PROJECT:hotpath.t_${ID}_$round"
    $F local create-table --table "$table" --schema-file scripts/bench/seed-schema.json >&2
    sinkargs=()
  fi
  FLEXRUN_LOG=warn $bin --template kafka-to-bq --job-name "hot-$name-$round-$ID" --checkpoint-dir "$OUT/ck" \
    --idle-timeout 2s "${sinkargs[@]}" \
    --summary-json "$OUT/$name-$round.json" \
    --parameters "readBootstrapServerAndTopic=$FLEXRUN_KAFKA;$topic,messageFormat=$fmt,kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,outputTableSpec=$table$extra" >&2
}

for r in $(seq 1 "$ROUNDS"); do
  echo "[bench] round $r of $ROUNDS" >&2
  $BARE "$FLEXRUN_KAFKA" "$TOPIC" "$N" 1 > "$OUT/bare-1-$r.json"
  $BARE "$FLEXRUN_KAFKA" "$TOPIC" "$N" 8 > "$OUT/bare-8-$r.json"
  $BARE "$FLEXRUN_KAFKA" "$TOPIC" "$N" split8 > "$OUT/bare-split8-$r.json"
  $BARE "$FLEXRUN_KAFKA" "$TOPIC" "$N" batch1 > "$OUT/bare-batch-$r.json"
  $BARE "$FLEXRUN_KAFKA" "$TOPIC" "$N" shards8 > "$OUT/bare-shards8-$r.json"
  $BARE "$FLEXRUN_KAFKA" "$TOPIC" "$N" shards8v > "$OUT/bare-shards8v-$r.json"
  job eo-stats "$r"
  job alo-stats "$r" ",useStorageWriteApiAtLeastOnce=true"
  job eo-quoted "$r" "" "$F" "${TOPIC}_q"
  job eo-avro "$r" "" "$F" "${TOPIC}_a" avro
  job eo-proto "$r" "" "$F" "${TOPIC}_p" proto
  job eo-bq "$r" "" "$F" "$TOPIC" bigquery
  $F local create-table --table "$FLEXRUN_BQ_PROJECT:hotpath.w_${ID}_$r" --schema-file scripts/bench/seed-schema.json >&2
  "${BARE%/*}/bare_writer" "$FLEXRUN_BQ_PROJECT:hotpath.w_${ID}_$r" "$N" > "$OUT/bare-writer-$r.json"
  if [ -n "${OLD_BIN:-}" ]; then job eo-old "$r" "" "$OLD_BIN"; fi
done

# The floor with today's mapping: flexrun's own per-message code (map, encode, request,
# logs) on one core with no Kafka, from `flexrun calibrate` (thread CPU time).
$F calibrate --modes exactly-once --duration 2s --format json --output "$OUT/baseline.yaml" > "$OUT/calibrate.json"

if [ "${PROFILE:-0}" = 1 ]; then
  echo "[bench] profiling one exactly-once run with perf" >&2
  perf record -F 999 -g -o "$OUT/perf.data" -- env FLEXRUN_LOG=warn $F --template kafka-to-bq \
    --job-name "hot-profile-$ID" --checkpoint-dir "$OUT/ck" --idle-timeout 2s --sink stats \
    --schema-file scripts/bench/seed-schema.json \
    --parameters "readBootstrapServerAndTopic=$FLEXRUN_KAFKA;$TOPIC,messageFormat=JSON,kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,outputTableSpec=p:d.t" >&2 2>/dev/null || true
  perf report -i "$OUT/perf.data" --no-children --sort dso,symbol --stdio 2>/dev/null \
    | grep -v '^#' | grep '%' | head -40 > target/bench/hot-path-profile.txt || true
  echo "[bench] profile: target/bench/hot-path-profile.txt" >&2
fi

python3 - "$OUT" "$N" "$ROUNDS" <<'PY'
import json, os, statistics, sys
out, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(name, r):
    j = json.load(open(os.path.join(out, f"{name}-{r}.json")))
    s = j.get("summary", j)
    act = s.get("active_s") or j.get("elapsed_s") or 1e-9
    cpu = s["cpu_user_s"] + s["cpu_sys_s"]
    # kafka-to-bq's CPU up to its last commit leaves out the idle wait before it drains;
    # the bare consumer stops at its last message, so its total is already that.
    to_last = s.get("cpu_to_last_commit_s", cpu)
    msgs = s.get("messages_read", s.get("messages"))
    gb = s.get("bytes_read", s.get("bytes")) / 1e9
    return msgs, act, cpu, cpu / gb, to_last / gb, gb * 1e9 / max(msgs, 1)
rows, last = {}, {}
print(f"kafka-to-bq hot path vs a bare librdkafka consumer: {n} seed-shape messages, 8 partitions, {rounds} rounds, {os.cpu_count()} cores")
print(f"{'way':<10} {'messages':>9} {'msg/s (median)':>15} {'CPU-s/GB (median)':>18} {'to last commit':>15} {'CPU-s/GB (each round)':>30}")
names = ["bare-1", "bare-8", "bare-split8", "bare-batch", "bare-shards8", "bare-shards8v", "eo-stats", "alo-stats", "eo-quoted", "eo-avro", "eo-proto", "eo-bq", "bare-writer"]
if os.path.exists(os.path.join(out, "eo-old-1.json")):
    names.append("eo-old")
for name in names:
    rs = [load(name, r) for r in range(1, rounds + 1)]
    short = [x for x in rs if x[0] < n]
    if short:
        # A broker stall longer than the idle timeout drains a job early; such a run
        # measures start-up, not the hot path, so it is left out and said.
        print(f"note: {name}: {len(short)} run(s) read fewer than {n} messages and are left out")
        rs = [x for x in rs if x[0] >= n] or rs
    med = statistics.median(x[3] for x in rs)
    med_last = statistics.median(x[4] for x in rs)
    rate = statistics.median(x[0] / x[1] for x in rs)
    rows[name], last[name] = med, med_last
    each = ", ".join(f"{x[3]:.2f}" for x in rs)
    print(f"{name:<10} {rs[0][0]:>9} {rate:>15.0f} {med:>18.2f} {med_last:>15.2f} {each:>30}")
if "eo-old" in rows:
    print(f"eo-stats / eo-old (this tree against the older binary): {rows['eo-stats'] / rows['eo-old']:.2f}x")
for name, target in [("eo-stats", 1.3), ("alo-stats", 1.3), ("eo-quoted", 1.3), ("eo-avro", 1.3), ("eo-proto", 1.3), ("eo-bq", 1.8)]:
    for bare in ["bare-1", "bare-batch"]:
        print(f"ratio {name} / {bare}: {rows[name] / rows[bare]:.2f}x in all, {last[name] / rows[bare]:.2f}x to the last commit (target <= {target:.2f}x against bare-1)")
floor = rows["bare-batch"] + rows["bare-writer"]
print(f"send path: bare-writer (pre-encoded rows through the same client) {rows['bare-writer']:.2f} CPU-s/GB; bare-batch + bare-writer {floor:.2f}; eo-bq / that {rows['eo-bq'] / floor:.2f}x in all, {last['eo-bq'] / floor:.2f}x to the last commit (target <= 1.20x)")
cal = json.load(open(os.path.join(out, "calibrate.json")))["measurements"]
size = load("bare-1", 1)[5]
m = min(cal, key=lambda m: abs(m["message_bytes"] - size))
own = 1e9 / (m["mib_per_core_s"] * 1048576)
print(f"flexrun's own code per GB (calibrate, exactly-once, {m['message_bytes']:.0f} B messages, no Kafka): {own:.2f} CPU-s/GB")
print(f"floor with today's mapping, bare-1 + own code: {rows['bare-1'] + own:.2f} CPU-s/GB = {(rows['bare-1'] + own) / rows['bare-1']:.2f}x bare-1")
PY
