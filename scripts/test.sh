#!/usr/bin/env bash
# The whole test suite. Tests start their own redis-server processes on free
# loopback ports; this only makes sure the binary exists.
#
# REDLEASE_SERVER picks the server the suite runs against: unset for
# `redis-server` on PATH (Debian's Redis 7.0), a name that
# scripts/servers.sh knows (`valkey-9.1`, `redis-6.2`), or a binary's path.
# Tests that need what that server lacks (TLS in a build without it,
# sharded pub/sub before 7.0) print SKIPPED with the reason; the count and
# the reasons are printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
if [ -n "${REDLEASE_SERVER:-}" ]; then
  case "$REDLEASE_SERVER" in
    */*) bin=$REDLEASE_SERVER ;;
    *) bin=$(scripts/servers.sh "$REDLEASE_SERVER") ;;
  esac
  # redis-test starts `redis-server` from PATH for some things and
  # $REDISRS_SERVER_BIN for others: both point at the chosen binary.
  shim=$(mktemp -d)
  trap 'rm -rf "$shim"' EXIT
  ln -s "$(realpath "$bin")" "$shim/redis-server"
  export PATH="$shim:$PATH" REDISRS_SERVER_BIN="$shim/redis-server"
fi
echo "server: $(redis-server --version)"
skips="${CARGO_TARGET_DIR:-target}/tmp/skipped.log"
mkdir -p "$(dirname "$skips")"
rm -f "$skips"
# Benchmarks are compiled (not run) so that they cannot rot.
cargo test --all-features --benches --no-run --quiet
status=0
cargo test --all-features "$@" || status=$?
# The model checker's own tests (its keyspace against a real server, the
# mutations it must report) and the bounded model check. They do not
# depend on the server or protocol the suite runs against: once per CI
# run, in the first pass (REDLEASE_CHECK=0 skips them, =1 forces them).
if [ "${REDLEASE_CHECK:-}" = 1 ] || { [ -z "${REDLEASE_CHECK:-}" ] && [ -z "${REDLEASE_SERVER:-}" ] && [ -z "${REDLEASE_TEST_RESP3:-}" ]; }; then
  cargo test --release -p redlease-check || status=$?
  scripts/check.sh || status=$?
fi
if [ -s "$skips" ]; then
  echo "skipped on this server ($(sort -u "$skips" | wc -l)), each with its reason:"
  sort -u "$skips" | sed 's/^/  /'
else
  echo "skipped on this server: none"
fi
exit $status
