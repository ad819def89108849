#!/usr/bin/env bash
# This machine's calibrated baseline and its broker's capacity boundary (issue 8).
#
#   scripts/bench-sizing.sh [SIZES] [TRIAL]     (default 100,1KiB,4KiB,16KiB and 5s trials)
#
# 1. `flexrun calibrate` (3 CPU-seconds per mode and size) writes bench-out/baseline.yaml and
#    prints throughput per core for the seed's message shape.
# 2. `flexrun capacity` against the local Apache Kafka broker (the 'bench' stack, a fresh 8-partition
#    topic) binary-searches 1,000..64,000 msg/s per size to 2,000 msg/s and prints the boundary;
#    the chart goes to bench-out/capacity.svg.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SIZES=${1:-100,1KiB,4KiB,16KiB}
TRIAL=${2:-5s}
mkdir -p bench-out
bash scripts/build-deps.sh
cargo build --release --bin flexrun >&2
bash scripts/stack.sh start bench >&2
eval "$(bash scripts/stack.sh env bench)"
echo "== calibrate"
target/release/flexrun calibrate --duration 3s --output bench-out/baseline.yaml
echo
echo "== estimate from it: 100 MiB/s exactly-once on e2-standard-2"
target/release/flexrun estimate --throughput 100MiB/s --baseline bench-out/baseline.yaml | sed -n 1,2p
echo
echo "== capacity"
target/release/flexrun capacity --bootstrap-server "$FLEXRUN_KAFKA" --topic "capacity-$(date +%s)" --partitions 8 \
  --sizes "$SIZES" --low 1000 --high 64000 --tolerance 2000 --trial "$TRIAL" --plot bench-out/capacity.svg 2>/dev/null
