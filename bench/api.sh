#!/usr/bin/env bash
# gputop's Python module beside nvitop's API on the same simulated machine (bench/api.py says
# what is measured). Installs what it needs: nvitop and maturin from PyPI in .venv-bench, and
# gputop's release wheel built into it.
#   bash bench/api.sh            # about 2 minutes after the build; prints a markdown table
#   bash bench/api.sh --smoke    # 1 GPU, seconds (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/build.sh
[ -x .venv-bench/bin/python ] || python3 -m venv .venv-bench
.venv-bench/bin/python -c "import nvitop" 2>/dev/null || .venv-bench/bin/pip install --quiet nvitop
[ -x .venv-bench/bin/maturin ] || .venv-bench/bin/pip install --quiet "maturin>=1.7,<2"
rm -rf target/bench-wheels
.venv-bench/bin/maturin build --quiet --release -m crates/gputop-py/Cargo.toml -o target/bench-wheels
.venv-bench/bin/pip install --quiet --force-reinstall --no-deps target/bench-wheels/gputop-*.whl
exec .venv-bench/bin/python bench/api.py "$@"
