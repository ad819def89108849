#!/usr/bin/env bash
# Headless Chromium for the web pages' end-to-end test, from Debian's packages.
# Idempotent: does nothing when present.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
echo "[chromium] installing chromium (Debian package) for the browser test" >&2
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
