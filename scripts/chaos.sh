#!/usr/bin/env bash
# The long chaos suite (RELIABILITY.md): 20 SIGKILLs during 200k-message runs (kafka-to-bq
# exactly-once and at-least-once, and kafka-to-gcs to the Cloud Storage emulator), a
# broker SIGKILL and restart, BigQuery UNAVAILABLE for 30 s and
# RESOURCE_EXHAUSTED for 2 min, records of 1 MB, 9.9 MB and 15 MB, 20 SIGKILLs with rows
# refused mid-batch and 200 kB requests, an idle partition written while the job was
# down, and topics joining a CDC pattern job under 10 SIGKILLs, on the real local stack (its own ports: stack name "chaos"). Prints a markdown
# table; about 25 minutes.
#
#   scripts/chaos.sh                      every scenario
#   scripts/chaos.sh chaos_large          only scenarios whose test name matches
#
# Exits 0 when every scenario passes (a scenario the stack could not serve would be
# listed as skipped with its reason; on Apache Kafka none is).
#   FLEXRUN_KILL_SEED=42 scripts/chaos.sh repeat a kill schedule
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/stack.sh start chaos
trap 'bash scripts/stack.sh stop chaos' EXIT
eval "$(bash scripts/stack.sh env chaos)"
export FLEXRUN_RESTART_BROKER="bash $(pwd)/scripts/stack.sh restart-kafka chaos"
out=$(mktemp)
bash scripts/build-deps.sh
cargo test --release --no-fail-fast --features flexrun/failpoints,flexrun/integration,flexrun/lsm -p flexrun --test it -- --ignored --test-threads=1 --nocapture "${@:-chaos}" 2>&1 | tee "$out" | grep -E "^(CHAOS|test |thread)" || true
echo
echo "| scenario | messages | faults | rows | distinct ids | lost | duplicates | recovery (s) |"
echo "|---|---:|---|---:|---:|---:|---:|---:|"
# A row may follow its test's name on the same line (libtest prints "test x ... " first).
grep -o 'CHAOS|.*' "$out" | sed 's/^CHAOS|/| /; s/|/ | /g; s/$/ |/' | sed 's/  */ /g' || true
# Scenarios the local stack cannot serve pass as skipped, each with its reason.
grep -o 'CHAOS-SKIP|.*' "$out" | sed 's/^CHAOS-SKIP|\([^|]*\)|/skipped: \1: /' || true
! grep -q "test result: FAILED" "$out" && grep -q "test result: ok" "$out"
