#!/usr/bin/env bash
# The demo: runs the examples against a Redis server. Uses $REDIS_URL when
# given; otherwise starts a private redis-server on a free loopback port and
# stops it afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${REDIS_URL:-}" ]; then
  scripts/ensure-redis.sh
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  dir=$(mktemp -d)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize no >"$dir/redis.log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
  for _ in $(seq 1 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.05
  done
  export REDIS_URL="redis://127.0.0.1:$port/"
  echo "== started a private redis-server at $REDIS_URL"
fi
examples="${*:-quickstart lottery rayon_batch api_limiter config_reload marketplace fenced_write deploy_gate transfer redlock}"
cargo build --quiet --examples
for ex in $examples; do
  if [ -f "examples/$ex.rs" ]; then
    echo "== example: $ex"
    cargo run --quiet --example "$ex"
  fi
done
echo "== demo finished"
