#!/usr/bin/env bash
# Installs Debian's prometheus, against which tests/prometheus_test.go checks
# the Grafana dashboard's and the alert rules' queries (deploy/), only when
# it is missing. Idempotent and non-interactive; quiet when nothing is missing.
set -euo pipefail

command -v prometheus >/dev/null 2>&1 && exit 0

echo "setup: installing prometheus" >&2
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt run (a concurrent set-up) instead of failing.
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
# --no-install-recommends: the binary alone, not the node exporter. The
# package's service is not needed: the test runs its own server.
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends prometheus >/dev/null
