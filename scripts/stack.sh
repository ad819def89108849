#!/usr/bin/env bash
# The local stack: a real Kafka-compatible broker (tansu), a real BigQuery
# emulator (bqemulator) and a real Cloud Storage emulator (gcp-storage-emulator),
# installed from the package registries into a cache outside the clone, and the
# project's own Confluent-compatible Schema Registry (scripts/schema_registry.py:
# none can be installed from the registries), all started on loopback ports.
#
#   scripts/stack.sh install            install both (idempotent, pinned, cached)
#   scripts/stack.sh start [NAME]       install if needed, start both, wait until ready
#   scripts/stack.sh stop  [NAME]       stop both
#   scripts/stack.sh status [NAME]      print pids and ports
#   scripts/stack.sh env   [NAME]       print the environment variables that point flexrun at it
#
# NAME (default "demo") selects a port set and a state folder, so the demo and
# the test suite can run side by side. Ports can be overridden with
# FLEXRUN_KAFKA_PORT, FLEXRUN_BQ_REST_PORT and FLEXRUN_BQ_GRPC_PORT.
set -euo pipefail

TANSU_VERSION=0.6.0
BQEMULATOR_VERSION=1.4.0
DUCKDB_VERSION=1.5.5
GCS_EMULATOR_VERSION=2026.7.19
GCS_BUCKET=flexrun
BQ_PROJECT=${FLEXRUN_BQ_PROJECT:-flexrun-local}

CACHE=${FLEXRUN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flexrun}
STACK=$CACHE/stack
# Bump TANSU_PATCH when scripts/tansu_patch.py changes: the build is cached per value.
TANSU_PATCH=1
TANSU_ROOT=$STACK/tansu-$TANSU_VERSION-p$TANSU_PATCH
TANSU_BIN=$TANSU_ROOT/bin/tansu
VENV=$STACK/bqemulator-$BQEMULATOR_VERSION
GCS_VENV=$STACK/gcs-emulator-$GCS_EMULATOR_VERSION
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { printf '[stack] %s\n' "$*" >&2; }

ports_for() {
  case "$1" in
    demo) echo "19092 19050 19060 19070 19081 19023" ;;
    test) echo "29092 29050 29060 29070 29081 29023" ;;
    bench) echo "39092 39050 39060 39070 39081 39023" ;;
    *) echo "49092 49050 49060 49070 49081 49023" ;;
  esac
}

set_names() {
  NAME=${1:-demo}
  read -r dk dr dg df ds dc <<<"$(ports_for "$NAME")"
  KAFKA_PORT=${FLEXRUN_KAFKA_PORT:-$dk}
  BQ_REST_PORT=${FLEXRUN_BQ_REST_PORT:-$dr}
  BQ_GRPC_PORT=${FLEXRUN_BQ_GRPC_PORT:-$dg}
  # The launcher's loopback fault-injection port (tests only; see bqemulator_launcher.py).
  BQ_FAULT_PORT=${FLEXRUN_BQ_FAULT_PORT:-$df}
  # The Confluent-compatible Schema Registry (scripts/schema_registry.py, stdlib Python).
  REGISTRY_PORT=${FLEXRUN_SCHEMA_REGISTRY_PORT:-$ds}
  # The Cloud Storage emulator (gcp-storage-emulator from PyPI, scripts/gcs_emulator_launcher.py).
  GCS_PORT=${FLEXRUN_GCS_PORT:-$dc}
  RUN=$CACHE/run/$NAME
}

install_tansu() {
  if [ -x "$TANSU_BIN" ] && "$TANSU_BIN" --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
    return
  fi
  log "building tansu $TANSU_VERSION with the SQLite engine and scripts/tansu_patch.py (about 15-20 minutes on 2 cores, once)"
  local work=$STACK/tansu-src
  rm -rf "$work" && mkdir -p "$work/fetch/src" "$TANSU_ROOT/bin"
  # The crates' published sources, through cargo from crates.io (no other download).
  printf '[package]\nname = "fetch-tansu"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\ntansu = "=%s"\n' \
    "$TANSU_VERSION" >"$work/fetch/Cargo.toml"
  echo 'fn main() {}' >"$work/fetch/src/main.rs"
  (cd "$work/fetch" && cargo fetch -q) >"$STACK/tansu-install.log" 2>&1 || {
    tail -30 "$STACK/tansu-install.log" >&2
    log "fetching tansu's sources failed; full log in $STACK/tansu-install.log"
    exit 1
  }
  local reg
  reg=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"tansu-$TANSU_VERSION" | head -1)
  cp -r "$reg" "$work/tansu"
  cp -r "$(dirname "$reg")/tansu-storage-$TANSU_VERSION" "$work/tansu-storage"
  python3 "$HERE/tansu_patch.py" "$work"
  # `cargo build` in the package keeps its published Cargo.lock, changing only the
  # patched crate's entry (`cargo install --path` would resolve everything afresh).
  # Its own target folder: .ci/run exports CARGO_TARGET_DIR for flexrun's build, and
  # tansu's binary must land where the next line copies it from.
  (cd "$work/tansu" && CARGO_TARGET_DIR="$work/tansu/target" cargo build --release --features dynostore,libsql) >>"$STACK/tansu-install.log" 2>&1 || {
    tail -30 "$STACK/tansu-install.log" >&2
    log "tansu build failed; full log in $STACK/tansu-install.log"
    exit 1
  }
  cp "$work/tansu/target/release/tansu" "$TANSU_BIN"
  rm -rf "$work"
}

install_bqemulator() {
  if [ -x "$VENV/bin/bqemulator" ] && [ -f "$VENV/.flexrun-ready" ]; then
    return
  fi
  log "installing bqemulator $BQEMULATOR_VERSION into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "bqemulator==$BQEMULATOR_VERSION" "duckdb==$DUCKDB_VERSION" numpy \
    "duckdb-extension-spatial==$DUCKDB_VERSION" >"$STACK/bqemulator-install.log" 2>&1 || {
    tail -30 "$STACK/bqemulator-install.log" >&2
    exit 1
  }
  # bqemulator asks DuckDB to download the spatial extension at start-up; there is no
  # network for that, so put the copy the PyPI package ships where DuckDB looks first.
  local ext
  ext=$(find "$VENV" -name spatial.duckdb_extension -path "*v$DUCKDB_VERSION*" | head -1)
  [ -n "$ext" ] || { log "spatial extension not found in the venv"; exit 1; }
  mkdir -p "$HOME/.duckdb/extensions/v$DUCKDB_VERSION/linux_amd64"
  cp "$ext" "$HOME/.duckdb/extensions/v$DUCKDB_VERSION/linux_amd64/"
  touch "$VENV/.flexrun-ready"
}

# gcp-storage-emulator: a Cloud Storage JSON API server in Python, from PyPI.
install_gcs_emulator() {
  if [ -f "$GCS_VENV/.flexrun-ready" ]; then
    return
  fi
  log "installing gcp-storage-emulator $GCS_EMULATOR_VERSION into $GCS_VENV"
  python3 -m venv "$GCS_VENV"
  "$GCS_VENV/bin/pip" install --quiet --disable-pip-version-check \
    "gcp-storage-emulator==$GCS_EMULATOR_VERSION" >"$STACK/gcs-install.log" 2>&1 || {
    tail -30 "$STACK/gcs-install.log" >&2
    exit 1
  }
  touch "$GCS_VENV/.flexrun-ready"
}

install() {
  mkdir -p "$STACK"
  # One install at a time (scripts/test.sh installs in the background while it builds,
  # and a demo may start meanwhile): the second waits for the first, then finds it done.
  exec 9>"$STACK/.install.lock"
  flock 9
  install_bqemulator
  install_gcs_emulator
  install_tansu
  # Release the lock now: `start` goes on to launch the daemons from this shell, and an
  # open descriptor would pass to them and hold the lock for as long as the stack runs
  # (a later `scripts/test.sh` then waited for it forever).
  flock -u 9
  exec 9>&-
}

wait_port() { # host port seconds what
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  log "$4 did not accept connections on $1:$2 within $3 s"
  return 1
}

is_running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  set_names "${1:-demo}"
  install
  mkdir -p "$RUN"
  if is_running "$RUN/tansu.pid" && is_running "$RUN/bq.pid" && is_running "$RUN/registry.pid" && is_running "$RUN/gcs.pid"; then
    log "stack '$NAME' already running"
    return
  fi
  stop "$NAME" >/dev/null 2>&1 || true
  rm -rf "$RUN/data" && mkdir -p "$RUN/data"
  (cd "$RUN/data" && exec nohup "$TANSU_BIN" broker \
    --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --storage-engine "sqlite://tansu.db" >"$RUN/tansu.log" 2>&1) &
  echo $! >"$RUN/tansu.pid"
  (cd "$RUN/data" && FLEXRUN_BQ_FAULT_PORT=$BQ_FAULT_PORT exec nohup "$VENV/bin/python" "$HERE/bqemulator_launcher.py" start \
    --rest-port "$BQ_REST_PORT" --grpc-port "$BQ_GRPC_PORT" \
    --project "$BQ_PROJECT" --log-level warning >"$RUN/bq.log" 2>&1) &
  echo $! >"$RUN/bq.pid"
  (cd "$RUN/data" && exec nohup python3 "$HERE/schema_registry.py" --port "$REGISTRY_PORT" \
    --state "$RUN/data/registry.json" >"$RUN/registry.log" 2>&1) &
  echo $! >"$RUN/registry.pid"
  (cd "$RUN/data" && exec nohup "$GCS_VENV/bin/python" "$HERE/gcs_emulator_launcher.py" --port "$GCS_PORT" \
    --bucket "$GCS_BUCKET" >"$RUN/gcs.log" 2>&1) &
  echo $! >"$RUN/gcs.pid"
  wait_port 127.0.0.1 "$KAFKA_PORT" 60 "tansu" || { tail -20 "$RUN/tansu.log" >&2; exit 1; }
  wait_port 127.0.0.1 "$BQ_REST_PORT" 90 "bqemulator REST" || { tail -20 "$RUN/bq.log" >&2; exit 1; }
  wait_port 127.0.0.1 "$BQ_GRPC_PORT" 30 "bqemulator gRPC" || { tail -20 "$RUN/bq.log" >&2; exit 1; }
  wait_port 127.0.0.1 "$REGISTRY_PORT" 30 "schema registry" || { tail -20 "$RUN/registry.log" >&2; exit 1; }
  wait_port 127.0.0.1 "$GCS_PORT" 30 "gcs emulator" || { tail -20 "$RUN/gcs.log" >&2; exit 1; }
  env_vars "$NAME" >"$RUN/env"
  log "stack '$NAME' up: kafka 127.0.0.1:$KAFKA_PORT, bigquery REST :$BQ_REST_PORT gRPC :$BQ_GRPC_PORT, schema registry :$REGISTRY_PORT, cloud storage :$GCS_PORT (bucket $GCS_BUCKET) (logs in $RUN)"
}

stop_pid() {
  local f=$1
  [ -f "$f" ] || return 0
  local pid
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

stop() {
  set_names "${1:-demo}"
  stop_pid "$RUN/tansu.pid"
  stop_pid "$RUN/bq.pid"
  stop_pid "$RUN/registry.pid"
  stop_pid "$RUN/gcs.pid"
  log "stack '$NAME' stopped"
}

status() {
  set_names "${1:-demo}"
  for s in tansu bq registry gcs; do
    if is_running "$RUN/$s.pid"; then echo "$s running (pid $(cat "$RUN/$s.pid"))"; else echo "$s stopped"; fi
  done
  env_vars "$NAME"
}

env_vars() {
  set_names "${1:-demo}"
  echo "export FLEXRUN_KAFKA=127.0.0.1:$KAFKA_PORT"
  echo "export BIGQUERY_EMULATOR_HOST=127.0.0.1:$BQ_REST_PORT"
  echo "export BIGQUERY_STORAGE_EMULATOR_HOST=127.0.0.1:$BQ_GRPC_PORT"
  echo "export FLEXRUN_BQ_PROJECT=$BQ_PROJECT"
  echo "export FLEXRUN_BQ_FAULTS=127.0.0.1:$BQ_FAULT_PORT"
  echo "export FLEXRUN_SCHEMA_REGISTRY=http://127.0.0.1:$REGISTRY_PORT"
  echo "export STORAGE_EMULATOR_HOST=127.0.0.1:$GCS_PORT"
  echo "export FLEXRUN_GCS_BUCKET=$GCS_BUCKET"
}

# SIGKILL the broker and start it again on the same data (the chaos suite's broker fault).
restart_kafka() {
  set_names "${1:-demo}"
  [ -f "$RUN/tansu.pid" ] && kill -KILL "$(cat "$RUN/tansu.pid")" 2>/dev/null || true
  sleep 2
  (cd "$RUN/data" && exec nohup "$TANSU_BIN" broker \
    --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --storage-engine "sqlite://tansu.db" >>"$RUN/tansu.log" 2>&1) &
  echo $! >"$RUN/tansu.pid"
  wait_port 127.0.0.1 "$KAFKA_PORT" 60 "tansu"
  log "tansu restarted"
}

cmd=${1:-}
shift || true
case "$cmd" in
  install) install ;;
  start) start "$@" ;;
  stop) stop "$@" ;;
  status) status "$@" ;;
  env) env_vars "$@" ;;
  restart-kafka) restart_kafka "$@" ;;
  # The tansu binary (built if missing), for benchmarks that start a broker of their own
  # (bench-progress.sh runs one with the memory engine: no durability, far faster).
  tansu-bin) install_tansu; echo "$TANSU_BIN" ;;
  # The Cloud Storage emulator's Python (installed if missing), for bench-commit.sh.
  gcs-python) mkdir -p "$STACK"; install_gcs_emulator; echo "$GCS_VENV/bin/python" ;;
  *) echo "usage: $0 install|start|stop|status|env [NAME] | tansu-bin" >&2; exit 2 ;;
esac
