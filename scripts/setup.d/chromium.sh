#!/usr/bin/env bash
# Installs Debian's chromium, in which the web UI's tests (api/ui_test.go,
# driven with chromedp) run headless, only when no Chromium is on PATH.
# Idempotent and non-interactive; quiet when nothing is missing.
set -euo pipefail

for b in chromium chromium-browser google-chrome; do
  command -v "$b" >/dev/null 2>&1 && exit 0
done

echo "setup: installing chromium" >&2
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt run (a concurrent set-up) instead of failing.
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends chromium >/dev/null
