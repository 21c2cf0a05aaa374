#!/usr/bin/env bash
# Runs nvitop (PyPI, in a venv this script makes) and gputop against the same simulated
# machine, so their readings can be compared side by side. Not part of CI: it needs PyPI.
#
#   scripts/compare-nvitop.sh [SCENARIO.toml] [SCENARIO_TIME_MS]
#
# Defaults: tests/scenarios/two-gpus-training.toml at scenario time 100 s (manual clock).
set -euo pipefail
cd "$(dirname "$0")/.."
scenario=${1:-tests/scenarios/two-gpus-training.toml}
time_ms=${2:-100000}
venv=.venv-nvitop

cargo build --release --locked -p nvml-sim -p gputop >&2
[ -x "$venv/bin/nvitop" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q nvitop; } >&2

simdir=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$simdir"; }
trap cleanup EXIT
cp target/release/libnvml_sim.so "$simdir/libnvidia-ml.so.1"
ln -s libnvidia-ml.so.1 "$simdir/libnvidia-ml.so"

# Real processes for the scenario's pid_env entries (nvitop and gputop both read /proc).
for _ in $(seq 64); do sleep 600 & pids+=($!); done
export GPUTOP_SIM_PIDS="${pids[*]}"
export GPUTOP_SIM_SCENARIO="$PWD/$scenario" GPUTOP_SIM_CLOCK=manual GPUTOP_SIM_TIME_MS="$time_ms"

cat > "$simdir/gputop.toml" <<'TOML'
[display]
default_metrics = ["utilization", "memory", "temperature", "power", "fan", "clocks"]
TOML

echo "== nvitop $("$venv/bin/python" -c 'import nvitop; print(nvitop.__version__)') -1 on $scenario at t=${time_ms} ms"
LD_LIBRARY_PATH="$simdir" COLUMNS=160 "$venv/bin/nvitop" -1
echo
echo "== gputop --once on the same machine"
target/release/gputop --once --config "$simdir/gputop.toml" --nvml-lib "$simdir/libnvidia-ml.so.1"
