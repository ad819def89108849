#!/usr/bin/env bash
# The lifecycle checker's long run (runner/tests/it/checker): N seeded schedules of what
# users and operators do to a kafka-to-bq job, each carried out on the real local stack
# and compared with the model. CI runs six seeds; this runs as many as you ask.
#
#   scripts/lifecycle.sh [--seeds N] [--from S] [--ops K] [--minutes M] [--gcs]
#
#   --seeds N    how many seeds (default 200), from S (default 1000)
#   --ops K      operations per schedule (default 12)
#   --minutes M  stop starting new seeds after M minutes (default: no limit)
#   --gcs        kafka-to-gcs's schedules and model instead (checker::many_gcs_seeds)
#
# A failing seed stops the run and prints the seed, its history and the shortest failing
# prefix; repeat one with `scripts/lifecycle.sh --from SEED --seeds 1`. The stack runs on
# its own ports (the name "lifecycle"), beside the tests' and the demo's. Progress, one
# line per seed, and the summary (operations drawn) go to the terminal and to
# target/lifecycle.log.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SEEDS=200 FROM=1000 OPS=12 MINUTES="" TEST=checker::many_seeds
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) SEEDS=$2; shift 2 ;;
    --from) FROM=$2; shift 2 ;;
    --ops) OPS=$2; shift 2 ;;
    --minutes) MINUTES=$2; shift 2 ;;
    --gcs) TEST=checker::many_gcs_seeds; shift ;;
    *) echo "usage: $0 [--seeds N] [--from S] [--ops K] [--minutes M] [--gcs]" >&2; exit 2 ;;
  esac
done
for v in "$SEEDS" "$FROM" "$OPS" ${MINUTES:+"$MINUTES"}; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "lifecycle.sh: expected a whole number, got '$v'" >&2; exit 2; }
done

FEATURES="flexrun/failpoints,flexrun/integration,flexrun/lsm"
CARGO_CONFIG=(--config 'profile.release.package.librocksdb-sys.opt-level=1')
bash scripts/build-deps.sh
if ! cargo nextest --version >/dev/null 2>&1; then
  CARGO_PROFILE_RELEASE_OPT_LEVEL=1 cargo install cargo-nextest --locked --quiet \
    --no-default-features --features default-no-update
fi
cargo build "${CARGO_CONFIG[@]}" --release -p flexrun --bins --tests --features "$FEATURES"
trap 'bash scripts/stack.sh stop lifecycle' EXIT
bash scripts/stack.sh start lifecycle
eval "$(bash scripts/stack.sh env lifecycle)"

export FLEXRUN_LIFECYCLE_SEEDS="$FROM..$((FROM + SEEDS))" FLEXRUN_LIFECYCLE_OPS="$OPS"
[ -n "$MINUTES" ] && export FLEXRUN_LIFECYCLE_MINUTES="$MINUTES"
mkdir -p target
START=$(date +%s)
cargo nextest run "${CARGO_CONFIG[@]}" --release -p flexrun --features "$FEATURES" --no-capture \
  --run-ignored only -E "test(=$TEST)" 2>&1 | tee target/lifecycle.log |
  grep -E '^lifecycle|lifecycle checker.*: seed .* fails|shortest failing prefix' || true
status=${PIPESTATUS[0]}
echo "[lifecycle] $(grep -c 'passed (' target/lifecycle.log) seeds passed in $(($(date +%s) - START)) s; log: target/lifecycle.log" >&2
exit "$status"
