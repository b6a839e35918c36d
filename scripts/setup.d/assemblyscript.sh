#!/usr/bin/env bash
# Installs what the AssemblyScript guest SDK (guest-sdk/assemblyscript) and
# the AssemblyScript examples need, only when missing:
#   node, npm       Node.js 20 or later runs the compiler (apt's nodejs when absent)
#   assemblyscript  the compiler, at the exact version of package-lock.json, into
#                   guest-sdk/assemblyscript/node_modules (npm ci), so that builds
#                   work offline afterwards
# Idempotent and non-interactive; quiet when nothing is missing.
set -euo pipefail

sdk="$(cd "$(dirname "$0")/../.." && pwd)/guest-sdk/assemblyscript"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "setup: installing nodejs npm" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # Wait for another apt run (a concurrent set-up) instead of failing.
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
  $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 20 ]; then
  echo "setup: the AssemblyScript compiler needs Node.js 20 or later; $(command -v node) is $(node --version)" >&2
  exit 1
fi

# The compiler is installed when its version is the one package.json pins.
want="$(node -p "require('$sdk/package.json').devDependencies.assemblyscript")"
have="$(node -p "try { require('$sdk/node_modules/assemblyscript/package.json').version } catch { '' }")"
if [ "$have" != "$want" ]; then
  echo "setup: installing assemblyscript $want into guest-sdk/assemblyscript/node_modules" >&2
  (cd "$sdk" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
