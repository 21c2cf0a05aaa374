#!/usr/bin/env bash
# gputop reading AMD and Intel GPUs through DRM beside NVML's cost for as many processes, on
# a fake machine of 1000 processes (bench/drm.py says what is measured).
#   bash bench/drm.sh               # about 3 minutes; prints a markdown table
#   bash bench/drm.sh --minutes 0.3 # a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/build.sh
exec python3 bench/drm.py "$@"
