#!/usr/bin/env bash
# The main job end to end on the local stack, from a fresh machine:
# builds flexrun, installs and starts the stack (Apache Kafka, bqemulator, the Cloud Storage
# emulator, the Schema Registry), creates a topic, a table and sample messages (some
# of them bad), runs kafka-to-bq exactly-once with a dead-letter table, prints the
# job's summary and the row counts, then writes the same topic as windowed files with
# kafka-to-gcs and lists both jobs.
#
#   scripts/demo.sh [MESSAGES]     (default 50000)
# FLEXRUN_CARGO_TIMINGS=1 also writes Cargo's timing report (target/cargo-timings/).
# The stack keeps running afterwards (scripts/stack.sh stop demo to stop it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${1:-50000}

T0=$(date +%s)
bash scripts/build-deps.sh --without-lsm
# The stack installs (Kafka through Maven, the emulators through pip) while flexrun
# builds: the build leaves a core idle in places, and the install is mostly waiting. At
# the lowest priority, since it still takes about 75 CPU-seconds, which the build would
# otherwise lose (the install ends long before the build either way).
mkdir -p "${FLEXRUN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flexrun}"
INSTALL_LOG="${FLEXRUN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flexrun}/demo-install.log"
nice -n 19 bash scripts/stack.sh install >"$INSTALL_LOG" 2>&1 &
INSTALL=$!
# Without the default features' JavaScript UDFs and Parquet output, which the demo's job
# does not use (about 96 CPU-seconds of the build): `cargo build --release` builds them in.
cargo build --release --bin flexrun --no-default-features ${FLEXRUN_CARGO_TIMINGS:+--timings}
T1=$(date +%s)
F=target/release/flexrun
wait "$INSTALL" || { tail -20 "$INSTALL_LOG" >&2; echo "installing the stack failed; log in $INSTALL_LOG" >&2; exit 1; }
T2=$(date +%s)
bash scripts/stack.sh start demo
eval "$(bash scripts/stack.sh env demo)"
T3=$(date +%s)

RUN_ID=$(date +%Y%m%d%H%M%S)
TOPIC=demo_$RUN_ID
TABLE=$FLEXRUN_BQ_PROJECT:demo.events_$RUN_ID
DLQ=$FLEXRUN_BQ_PROJECT:demo.events_${RUN_ID}_dlq

$F local create-topic --topic "$TOPIC" --partitions 8
$F local create-table --table "$TABLE"
$F local produce --topic "$TOPIC" --count "$N" --bad-every 5000

echo
echo "== flexrun --template kafka-to-bq (exactly-once, drains after 3 s without new messages)"
$F --template kafka-to-bq --job-name "demo-$RUN_ID" --idle-timeout 3s \
  --parameters "readBootstrapServerAndTopic=$FLEXRUN_KAFKA;$TOPIC,messageFormat=JSON,kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,outputTableSpec=$TABLE,useBigQueryDLQ=true,outputDeadletterTable=$DLQ"

echo
echo "== what landed in BigQuery (emulator)"
$F local count --table "$TABLE" --distinct id
$F local count --table "$DLQ"

echo
echo "== flexrun --template kafka-to-gcs: the same topic as 10 s windows of files in the Cloud Storage emulator"
$F --template kafka-to-gcs --job-name "files-$RUN_ID" --idle-timeout 3s \
  --parameters "readBootstrapServerAndTopic=$FLEXRUN_KAFKA;$TOPIC,kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=JSON,outputDirectory=gs://$FLEXRUN_GCS_BUCKET/demo_$RUN_ID/,windowDuration=10s,numShards=4"

echo
echo "== the jobs, as gcloud dataflow jobs list shows them"
$F dataflow jobs list --status all --filter "$RUN_ID"

T4=$(date +%s)
echo
echo "demo: build $((T1 - T0)) s, then waiting for the stack's install $((T2 - T1)) s, stack start $((T3 - T2)) s, the jobs $((T4 - T3)) s; $((T4 - T0)) s in all" >&2
