#!/usr/bin/env bash
# The fleet view against a real Prometheus holding a backfilled fleet (bench/fleet.py says what
# is measured). Needs prometheus and promtool (Debian's package `prometheus`).
#   bash bench/fleet.sh                 # 2000 nodes x 8 GPUs x 16 processes a GPU, ~10 minutes
#   bash bench/fleet.sh --processes 2   # the same fleet with an eighth of the processes
#   bash bench/fleet.sh --smoke         # 20 nodes, seconds (CI's scheduled run)
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/build.sh
exec python3 bench/fleet.py "$@"
