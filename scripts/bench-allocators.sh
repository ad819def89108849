#!/usr/bin/env bash
# flexrun's own per-message cost (`flexrun calibrate`, exactly-once, 998-byte messages,
# no Kafka) under four allocators, alternated in each round so that they share the
# machine's noise (issue 29, step 1):
#   glibc     glibc malloc with its defaults (FLEXRUN_MALLOPT=0)
#   mallopt   glibc malloc with flexrun's start-up settings (runner/src/malloc.rs; the default)
#   mimalloc  the mimalloc crate as the global allocator (--features alloc-mimalloc)
#   jemalloc  tikv-jemallocator as the global allocator (--features alloc-jemalloc)
# Prints the median MiB per core-second, the ratio to glibc's defaults, and the minor
# page faults of the last round (GNU time).
#
#   scripts/bench-allocators.sh [ROUNDS]     (default 3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROUNDS=${1:-3}
D=target/bench/alloc
mkdir -p "$D"
bash scripts/build-deps.sh
for v in mimalloc jemalloc; do
  cargo build --release --bin flexrun --features "alloc-$v" >&2
  cp target/release/flexrun "$D/flexrun-$v"
done
cargo build --release --bin flexrun >&2
cp target/release/flexrun "$D/flexrun-glibc"
run() { # variant -> "MiB/core-s minor-faults"
  local v=$1 bin="$D/flexrun-glibc" env=()
  case $v in
    glibc) env=(FLEXRUN_MALLOPT=0) ;;
    mimalloc | jemalloc) bin="$D/flexrun-$v" ;;
  esac
  /usr/bin/time -f "faults %R" -o "$D/time.txt" env "${env[@]}" "$bin" calibrate --modes exactly-once --output "$D/baseline.yaml" \
    --duration 2s > "$D/out.txt" 2> /dev/null
  echo "$(awk '/^exactly-once +998/{print $5}' "$D/out.txt") $(awk '/^faults/{print $2}' "$D/time.txt")"
}
: > "$D/results.txt"
for r in $(seq 1 "$ROUNDS"); do
  for v in glibc mallopt mimalloc jemalloc; do
    echo "$v $(run $v)" >> "$D/results.txt"
  done
  echo "[bench] round $r of $ROUNDS" >&2
done
python3 - "$D/results.txt" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    v, mib, faults = line.split()
    rows.setdefault(v, []).append((float(mib), int(faults)))
base = statistics.median(m for m, _ in rows["glibc"])
print(f"{'allocator':<10} {'MiB/core-s':>11} {'vs glibc':>9} {'CPU-s/GB':>9} {'minor faults':>13}")
for v in ["glibc", "mallopt", "mimalloc", "jemalloc"]:
    med = statistics.median(m for m, _ in rows[v])
    print(f"{v:<10} {med:>11.1f} {med / base:>8.2f}x {1e3 / (med * 1.048576):>9.2f} {rows[v][-1][1]:>13}")
PY
