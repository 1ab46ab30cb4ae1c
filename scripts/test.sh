#!/usr/bin/env bash
# The whole test suite. Tests start their own redis-server processes on free
# loopback ports; this only makes sure the binary exists.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
# Benchmarks are compiled (not run) so that they cannot rot.
cargo test --all-features --benches --no-run --quiet
cargo test --all-features "$@"
