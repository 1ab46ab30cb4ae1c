#!/usr/bin/env bash
# Makes sure `redis-server` is on PATH, installing Debian's package when it
# is missing and we are allowed to (root, or passwordless sudo).
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
echo "redis-server not found; installing Debian's redis-server package" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "error: redis-server is missing and I cannot install it (not root). Install it: apt-get install redis-server" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq redis-server >/dev/null
# The package starts a system service on 6379; we never use it.
command -v redis-server >/dev/null
