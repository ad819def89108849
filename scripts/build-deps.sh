#!/usr/bin/env bash
# What building flexrun needs beyond the Rust toolchain, from Debian's packages:
# libclang, which rocksdb's bindings generator (bindgen) loads while librocksdb-sys
# builds RocksDB for the lsm state backend. Idempotent: does nothing when present.
set -euo pipefail
if ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1; then
  exit 0
fi
echo "[build-deps] installing libclang-dev (Debian package) for rocksdb's bindgen" >&2
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libclang-dev >/dev/null
