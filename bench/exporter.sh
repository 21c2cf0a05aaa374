#!/usr/bin/env bash
# `gputop export` beside nvitop-exporter on the same simulated machine (bench/exporter.py says
# what is measured). Installs nvitop-exporter from PyPI into .venv-bench.
#   bash bench/exporter.sh             # about 12 minutes; prints markdown tables
#   bash bench/exporter.sh --smoke     # 1 GPU, seconds (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/build.sh
if [ ! -x .venv-bench/bin/nvitop-exporter ]; then
  [ -x .venv-bench/bin/pip ] || python3 -m venv .venv-bench
  .venv-bench/bin/pip install --quiet nvitop-exporter
fi
exec python3 bench/exporter.py "$@"
