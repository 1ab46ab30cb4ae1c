#!/usr/bin/env bash
# Makes sure `redis-server` and `redis-cli` (and `openssl`, which the tests
# use to make TLS certificates) are on PATH, installing Debian's packages
# when missing and we are allowed to (root, or passwordless sudo).
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing Debian packages: ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "error: ${missing[*]} missing and I cannot install (not root): apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
# The package starts a system service on 6379; we never use it.
command -v redis-server >/dev/null
