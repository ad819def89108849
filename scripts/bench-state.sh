#!/usr/bin/env bash
# Seed 003 on this machine: heap/full, lsm/full and lsm/incremental window state at
# three input rates, scaled down from the seed (Flink, 10-minute windows, a checkpoint
# every 3 minutes, 2K keys, ~800-byte records, 10k/20k/30k records/s).
#
#   scripts/bench-state.sh [RATES] [SECONDS]     (default "2500 5000 7500", 90)
#
# Here: 30 s fixed windows with a checkpoint every 9 s (the seed's 10:3 ratio), 2,000
# shards per window (the state's 2K keys), ~800-byte JSON records from the
# streaming-data-generator, 4 partitions; files to the local disk, checkpoints to the
# Cloud Storage emulator (the seed's S3). Each run reads for SECONDS while the
# generator produces, is then SIGKILLed, and restarted to measure recovery from its
# latest checkpoint; the restart then drains and every record must be in exactly one
# file. Prints the seed's table (state size, RSS, heap, CPU, checkpoint size and
# duration, plus recovery time), writes target/bench/state.json and the chart
# docs/bench/state-checkpoints.svg (checkpoint duration against state size).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RATES=${1:-"2500 5000 7500"}
SECONDS_PER_RUN=${2:-90}
bash scripts/build-deps.sh
# The lsm rows need RocksDB, which the default build leaves out (the `lsm` feature).
cargo build --release --bin flexrun --features flexrun/lsm >&2
BIN="${CARGO_TARGET_DIR:-target}/release/flexrun"
bash scripts/stack.sh start bench >&2
eval "$(bash scripts/stack.sh env bench)"
mkdir -p target/bench docs/bench
python3 scripts/bench_state.py --flexrun "$BIN" --rates "$RATES" --seconds "$SECONDS_PER_RUN" \
  --json target/bench/state.json --svg docs/bench/state-checkpoints.svg
