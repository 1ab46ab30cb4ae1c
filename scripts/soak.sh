#!/usr/bin/env bash
# The long nemesis soak (tests/nemesis.rs): 100,000 acquisitions of a lock,
# a write lock and a semaphore by 4 processes through a fault-injecting
# proxy, with a SIGSTOPped holder and a server restart, checked afterwards.
# Prints a `FIGURES nemesis:` line. Extra arguments go to the test binary.
#
#   REDLEASE_SOAK_ACQUISITIONS  target (default here 100000)
#   REDLEASE_SOAK_SEED          fault schedule seed (printed by every run)
#   REDLEASE_SOAK_HISTORY_DIR   keep the recorded histories there
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
export REDLEASE_SOAK_ACQUISITIONS="${REDLEASE_SOAK_ACQUISITIONS:-100000}"
cargo test --release --all-features --test nemesis -- --nocapture "$@"
