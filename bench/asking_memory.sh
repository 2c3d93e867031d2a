#!/usr/bin/env bash
# What a call that asks costs the server between question and answer over
# MCP, stateless (rounds) and with sessions: builds the release quickstart and
# runs bench/asking_memory.py against it (127.0.0.1 only).
#
#   bash bench/asking_memory.sh        # 500 calls each way
#   bash bench/asking_memory.sh 2000
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p haip-examples --example quickstart
python3 -B bench/asking_memory.py target/release/examples/quickstart "${1:-500}"
