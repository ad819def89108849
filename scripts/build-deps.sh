#!/usr/bin/env bash
# What building and testing flexrun needs beyond the Rust toolchain, from Debian's
# packages: libclang, which rocksdb's bindings generator (bindgen) loads while
# librocksdb-sys builds RocksDB for the lsm state backend (the `lsm` feature), libzstd-dev
# and pkg-config, which zstd-sys links instead of compiling zstd (runner/Cargo.toml), Java 17
# with Maven and openssl for the local Kafka broker (scripts/stack.sh). Idempotent: does
# nothing when all are present. `build-deps.sh --without-lsm` leaves libclang out (the
# demo's build has no RocksDB).
set -euo pipefail
missing=()
if [ "${1:-}" != --without-lsm ]; then
  ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || missing+=(libclang-dev)
fi
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
{ command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libzstd; } || missing+=(libzstd-dev)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "[build-deps] installing ${missing[*]} (Debian packages)" >&2
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
