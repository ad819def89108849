#!/usr/bin/env bash
# Before/after on this noisy 2-core machine: the streaming-data-generator (null sink,
# the generator alone) and `flexrun simulate` (24 h of the seed's setup), run
# alternately with an older revision's binary and this tree's, so both see the same
# noise. Prints the median of each side and the ratio new/old.
#
#   scripts/bench-compare.sh OLD_REV [ROUNDS]      (default 5 rounds)
#
# The old revision is built once in a git worktree under target/compare/OLD_REV (its
# own target directory; about as long as a clean release build).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OLD_REV=${1:?usage: scripts/bench-compare.sh OLD_REV [ROUNDS]}
ROUNDS=${2:-5}
WT=target/compare/$OLD_REV
if [ ! -x "$WT/target/release/flexrun" ]; then
  [ -d "$WT" ] || git worktree add -f "$WT" "$OLD_REV" >&2
  bash scripts/build-deps.sh
  (cd "$WT" && CARGO_TARGET_DIR="$PWD/target" cargo build --release --bin flexrun >&2)
fi
cargo build --release --bin flexrun >&2
OLD=$WT/target/release/flexrun
NEW=target/release/flexrun
OUT=$(mktemp -d)
printf '%s\n' '{"logStreamId":"{{integer(1000001,2000000)}}","message":"{{alphaNumeric(962)}}"}' > "$OUT/seed.json"
GEN=(--template streaming-data-generator --seed 1
     --parameters "qps=1000000000,schemaLocation=$OUT/seed.json,sinkType=NULL,messagesLimit=2000000")
SIM=(simulate --rate 1GiB/s --message-size 1KiB --partitions 1000 --max-workers 120
     --worker-machine-type e2-standard-2 --duration 24h --parameters numStorageWriteApiStreams=400 --format json)
for r in $(seq 1 "$ROUNDS"); do
  echo "[compare] round $r of $ROUNDS" >&2
  for side in old new; do
    bin=$OLD; [ "$side" = new ] && bin=$NEW
    "$bin" "${GEN[@]}" --summary-json "$OUT/gen-$side-$r.json" >/dev/null 2>&1
    start=$(date +%s.%N)
    "$bin" "${SIM[@]}" >/dev/null 2>&1
    end=$(date +%s.%N)
    echo "$end - $start" | bc -l > "$OUT/sim-$side-$r.txt"
  done
done
python3 - "$OUT" "$ROUNDS" "$OLD_REV" <<'PY'
import json, os, statistics, sys
out, rounds, rev = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def gen(side):
    rs = [json.load(open(os.path.join(out, f"gen-{side}-{r}.json"))) for r in range(1, rounds + 1)]
    return [x["sent"] / x["cpu_s"] for x in rs]
def sim(side):
    return [float(open(os.path.join(out, f"sim-{side}-{r}.txt")).read()) for r in range(1, rounds + 1)]
print(f"before/after, {rounds} alternating rounds, old = {rev}, this machine ({os.cpu_count()} cores)")
print(f"{'measure':<36} {'old (median)':>14} {'new (median)':>14} {'new/old':>8}")
for name, f, fmt in [("generator, msg per CPU-s (null sink)", gen, "{:>14.0f}"), ("simulate 24 h, wall s", sim, "{:>14.3f}")]:
    o, n = statistics.median(f("old")), statistics.median(f("new"))
    print(f"{name:<36} " + fmt.format(o) + " " + fmt.format(n) + f" {n / o:>8.2f}")
PY
