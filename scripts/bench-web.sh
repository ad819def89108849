#!/usr/bin/env bash
# /api/estimate latency under an open-loop load from loopback.
#
#   scripts/bench-web.sh [RATE] [SECONDS]       (default 1000 requests/s for 20 s)
#
# Starts `flexrun web` on 127.0.0.1:18080, sends RATE requests per second over 8
# keep-alive connections (latency from each request's scheduled time), prints
# p50/p90/p99/max, and stops the server.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RATE=${1:-1000}
SECS=${2:-20}
bash scripts/build-deps.sh
cargo build --release --bin flexrun >&2
cargo build --release -p flexrun-web --example loadgen >&2
target/release/flexrun web --addr 127.0.0.1:18080 >&2 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/18080) 2>/dev/null && break; sleep 0.1; done
target/release/examples/loadgen 127.0.0.1:18080 "/api/estimate?throughput=100MiB/s&mode=exactly-once" "$RATE" "$SECS" 8
