#!/usr/bin/env bash
# Installs what the Rust guest SDK (guest-sdk/rust) and the Rust examples
# need, only when missing: Debian's rustc and its wasm32 standard library.
#   rustc                   /usr/bin/rustc (the builders call it by that path:
#                           a rustup toolchain earlier on PATH may lack wasm32)
#   libstd-rust-dev-wasm32  the std and core rlibs for wasm32-unknown-unknown
# Idempotent and non-interactive; quiet when nothing is missing.
set -euo pipefail

need=()
[ -x /usr/bin/rustc ] || need+=(rustc)
# The wasm32 standard library lives in rustc's sysroot; look for libstd there.
sysroot=/usr/lib/rustlib/wasm32-unknown-unknown/lib
if ! compgen -G "$sysroot/libstd-*.rlib" >/dev/null; then
  need+=(libstd-rust-dev-wasm32)
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # Wait for another apt run (a concurrent set-up) instead of failing.
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
  $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
