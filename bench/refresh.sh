#!/usr/bin/env bash
# NVML calls and heap allocations per steady refresh of gputop's live view and of the floor
# program (bench/refresh.py says how they are counted). Needs valgrind; installs it as root.
#   bash bench/refresh.sh           # about 6 minutes; prints a markdown table
#   bash bench/refresh.sh --smoke   # 1 GPU, under a minute (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/build.sh
if ! command -v valgrind >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind
  else
    echo "bench/refresh.sh needs valgrind (apt-get install valgrind)" >&2
    exit 1
  fi
fi
exec python3 bench/refresh.py "$@"
