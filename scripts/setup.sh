#!/usr/bin/env bash
# Installs what building and testing wstream needs beyond Go, only when missing.
# Idempotent and non-interactive: safe to run on every build.
#   wabt        wat2wasm, for modules written in WebAssembly text
#   clang, lld  the C guest SDK and the C examples (clang --target=wasm32, wasm-ld)
# Each script in setup.d adds what one more part needs (Rust, AssemblyScript,
# chromium for the web UI tests, prometheus for the dashboard and alert
# rules' test).
set -euo pipefail

need=()
command -v wat2wasm >/dev/null 2>&1 || need+=(wabt)
command -v clang >/dev/null 2>&1 || need+=(clang)
command -v wasm-ld >/dev/null 2>&1 || need+=(lld)

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Each guest toolchain beyond C has its own script (Rust, AssemblyScript...).
for s in "$(dirname "$0")"/setup.d/*.sh; do
  [ -e "$s" ] || continue
  bash "$s"
done
