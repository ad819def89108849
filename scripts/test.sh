#!/usr/bin/env bash
# Run every test: unit tests, and integration tests against a real local stack
# (tansu + bqemulator), which this script installs if needed, starts on its own
# ports, and stops again on exit.
#
#   scripts/test.sh                 everything
#   scripts/test.sh -E "test(/avro/)"   extra arguments go to `cargo nextest run`
#
# Plain `cargo test` (no services) runs the pure tests only; the integration tests sit
# behind the `integration` (runner) and `browser` (web) features, turned on here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FEATURES="flexrun/failpoints,flexrun/integration,flexrun-web/browser"

T0=$(date +%s)
step() { echo "[test] $* ($(($(date +%s) - T0)) s in)" >&2; }

# Style and the layering first: they fail fast and need no services.
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "[test] cargo-nextest is needed to run the suite (this machine's toolchain normally has it): cargo install cargo-nextest --locked" >&2
  exit 1
fi
step "cargo fmt --check"
bash scripts/build-deps.sh
cargo fmt --all --check

# The stack's install (on a fresh machine, tansu's build from source: about 16 minutes)
# and Chromium's run beside flexrun's build: each has phases that leave a core idle.
mkdir -p "${FLEXRUN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flexrun}"
INSTALL_LOG="${FLEXRUN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flexrun}/test-install.log"
(bash scripts/install-chromium.sh && nice -n 5 bash scripts/stack.sh install) >"$INSTALL_LOG" 2>&1 &
INSTALL_PID=$!
step "layering: no module names a layer above it"
python3 scripts/check_layers.py

# Lints and the test build are one build. clippy-driver is rustc plus clippy's lints;
# as the workspace's rustc wrapper (what `cargo clippy` itself sets up) it lints each
# workspace crate while compiling it for the tests, so nothing is compiled twice
# (`cargo clippy` then `cargo test` would check every crate once more first).
# CLIPPY_ARGS is how cargo-clippy hands clippy-driver its `-- -D warnings`.
export RUSTC_WORKSPACE_WRAPPER="$(dirname "$(rustup which cargo 2>/dev/null || command -v cargo)")/clippy-driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
step "build every target, linted (clippy -D warnings)"
cargo build --release --workspace --all-targets --features "$FEATURES"
B1=$(date +%s)

step "waiting for the stack's install and Chromium (log: $INSTALL_LOG)"
if ! wait "$INSTALL_PID"; then
  tail -30 "$INSTALL_LOG" >&2
  echo "[test] installing the stack or Chromium failed; full log in $INSTALL_LOG" >&2
  exit 1
fi
S0=$(date +%s)

step "local stack"
bash scripts/stack.sh start test
trap 'bash scripts/stack.sh stop test' EXIT
eval "$(bash scripts/stack.sh env test)"
S1=$(date +%s)

# Release mode: the tests push 100k-message jobs through the real services, and the
# debug build's message generation alone is ten times slower. cargo-nextest runs every
# test in its own process, several at once (.config/nextest.toml says how many, and
# which few run alone and why); doc tests, which nextest does not run, follow.
# Property tests draw their cases from one seed as well (proptest's own variable), so a
# run repeats exactly; FLEXRUN_TEST_SEED varies it together with the kill schedules.
export PROPTEST_RNG_SEED="${PROPTEST_RNG_SEED:-${FLEXRUN_TEST_SEED:-20261203}}"
echo "[test] property tests seeded with PROPTEST_RNG_SEED=$PROPTEST_RNG_SEED"
step "tests (cargo nextest, in parallel)"
cargo nextest run --release --workspace --no-fail-fast --features "$FEATURES" "$@"
step "doc tests"
cargo test --release --workspace --doc --features "$FEATURES"
T1=$(date +%s)
echo "[test] done: build and lints $((B1 - T0)) s, then waiting for the install $((S0 - B1)) s, stack $((S1 - S0)) s, tests $((T1 - S1)) s, total $((T1 - T0)) s" >&2
