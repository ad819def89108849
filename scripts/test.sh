#!/usr/bin/env bash
# Run every test: unit tests, and integration tests against a real local stack
# (Apache Kafka, a three-broker Kafka cluster for the failover tests, bqemulator, the
# Cloud Storage emulator and the Schema Registry), which this script installs if
# needed, starts on its own ports, and stops again on exit.
#
#   scripts/test.sh                 everything
#   scripts/test.sh -E "test(/avro/)"   extra arguments go to `cargo nextest run`
#
# Plain `cargo test` (no services) runs the pure tests only; the integration tests sit
# behind the `integration` (runner) and `browser` (web) features, turned on here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FEATURES="flexrun/failpoints,flexrun/integration,flexrun/lsm,flexrun-web/browser"
# The test build: RocksDB's C++ at opt-level 1, not 3. GCC's front end is most of a C++
# file's compile; the optimiser's share is what this saves, about a third of RocksDB's
# build (one of its files: 15.2 s at -O3, 9.8 s at -O1, 8.4 s at -O0), and the tests'
# window state is small. `--features lsm` builds elsewhere, and scripts/bench-state.sh,
# keep -O3. The workspace's crates compile incrementally: a second run recompiles only
# what changed (rustc's cache is kept by path; .ci/run runs from one fixed path).
CARGO_CONFIG=(--config 'profile.release.package.librocksdb-sys.opt-level=1')
export CARGO_INCREMENTAL=1

T0=$(date +%s)
step() { echo "[test] $* ($(($(date +%s) - T0)) s in)" >&2; }

# Style and the layering first: they fail fast and need no services.
# The tools the suite assumes, each checked; what is missing is installed from the
# registries (cargo-nextest from crates.io, cached in ~/.cargo/bin; clippy and rustfmt as
# rustup components; libclang, Java and Maven from Debian), or the script says why not.
# cargo-nextest is built without its self-update (an HTTP and TLS stack it needs only to
# replace itself) and at opt-level 1 (a test runner waits on its tests): 267 s on 2 cores
# against 452 s for the default install (BENCHMARKS.md, "The suite").
if ! cargo nextest --version >/dev/null 2>&1; then
  step "installing cargo-nextest from crates.io (once per machine, about 4.5 minutes on 2 cores)"
  CARGO_PROFILE_RELEASE_OPT_LEVEL=1 cargo install cargo-nextest --locked --quiet \
    --no-default-features --features default-no-update
fi
for c in clippy rustfmt; do
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
    step "installing the rustup component $c"
    rustup component add "$c"
  fi
done
step "cargo fmt --check"
bash scripts/build-deps.sh
cargo fmt --all --check

# The stack's install (Kafka through Maven, bqemulator and the Cloud Storage emulator
# through pip: about 3 minutes on a fresh machine) and Chromium's run beside flexrun's
# build, which leaves a core idle in places.
mkdir -p "${FLEXRUN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flexrun}"
INSTALL_LOG="${FLEXRUN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flexrun}/test-install.log"
(nice -n 19 bash scripts/install-chromium.sh && nice -n 19 bash scripts/stack.sh install) >"$INSTALL_LOG" 2>&1 &
INSTALL_PID=$!
step "layering and structure: no module names a layer above it; no file or function too long"
python3 scripts/check_layers.py
python3 scripts/check_structure.py

# Lints and the test build are one build. clippy-driver is rustc plus clippy's lints;
# as the workspace's rustc wrapper (what `cargo clippy` itself sets up) it lints each
# workspace crate while compiling it for the tests, so nothing is compiled twice
# (`cargo clippy` then `cargo test` would check every crate once more first).
# CLIPPY_ARGS is how cargo-clippy hands clippy-driver its `-- -D warnings`.
export RUSTC_WORKSPACE_WRAPPER="$(dirname "$(rustup which cargo 2>/dev/null || command -v cargo)")/clippy-driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
step "build every target, linted (clippy -D warnings)"
cargo build "${CARGO_CONFIG[@]}" --release --workspace --all-targets --features "$FEATURES"
B1=$(date +%s)

step "waiting for the stack's install and Chromium (log: $INSTALL_LOG)"
if ! wait "$INSTALL_PID"; then
  tail -30 "$INSTALL_LOG" >&2
  echo "[test] installing the stack or Chromium failed; full log in $INSTALL_LOG" >&2
  exit 1
fi
S0=$(date +%s)

step "local stack, and the three-broker cluster for the failover tests"
trap 'bash scripts/stack.sh stop test' EXIT
bash scripts/stack.sh start test
bash scripts/stack.sh cluster-start test
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
cargo nextest run "${CARGO_CONFIG[@]}" --release --workspace --no-fail-fast --features "$FEATURES" "$@"
step "doc tests"
cargo test "${CARGO_CONFIG[@]}" --release --workspace --doc --features "$FEATURES"
# The demo's build leaves the default features out (scripts/demo.sh): the libraries' unit
# tests without them, which include the refusals of a UDF and of Parquet, so that it keeps
# compiling. The whole workspace with the same other features, so Cargo unifies every
# dependency's features as in the build above and compiles only flexrun's library again
# (with `-p flexrun` alone it compiled 28 dependencies again: 279 s of a fresh run).
step "unit tests of the build without default features (the demo's)"
cargo test "${CARGO_CONFIG[@]}" --release --workspace --lib --no-default-features --features "$FEATURES"
T1=$(date +%s)
echo "[test] done: build and lints $((B1 - T0)) s, then waiting for the install $((S0 - B1)) s, stack $((S1 - S0)) s, tests $((T1 - S1)) s, total $((T1 - T0)) s" >&2
