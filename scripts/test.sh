#!/usr/bin/env bash
# Run every test: unit tests, and integration tests against a real local stack
# (tansu + bqemulator), which this script installs if needed, starts on its own
# ports, and stops again on exit.
#
#   scripts/test.sh                 everything
#   scripts/test.sh -p flexrun      extra arguments go to `cargo test`
#
# Plain `cargo test` (no services) runs the pure tests only; the integration tests sit
# behind the `integration` (runner) and `browser` (web) features, turned on here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FEATURES="flexrun/failpoints,flexrun/integration,flexrun-web/browser"

# Style and lints first: they fail fast and need no services.
echo "[test] cargo fmt --check" >&2
bash scripts/build-deps.sh
cargo fmt --all --check
echo "[test] cargo clippy -D warnings" >&2
cargo clippy --release --workspace --all-targets --features "$FEATURES" -- -D warnings

# Headless Chromium for the web pages' end-to-end test (Debian's package).
if ! command -v chromium >/dev/null 2>&1; then
  echo "[test] installing chromium (Debian package) for the browser test" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

bash scripts/stack.sh start test
trap 'bash scripts/stack.sh stop test' EXIT
eval "$(bash scripts/stack.sh env test)"

# Release mode: the tests push 100k-message jobs through the real services, and the
# debug build's message generation alone is ten times slower.
cargo test --release --workspace --no-fail-fast --features "$FEATURES" "$@" -- --test-threads=1
