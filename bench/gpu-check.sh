#!/usr/bin/env bash
# gputop on a real NVIDIA GPU beside nvidia-smi, under a burst workload of known shape.
#
#   bash bench/gpu-check.sh [OUT]        # on a machine with a GPU, python3 and torch
#   bash bench/gpu-check.sh --sim [OUT]  # the same steps on the simulator (no GPU, no torch)
#
# A workload holds 2 GiB on GPU 0 and runs matrix products for 200 ms every 2 s. While it
# runs, the script takes `gputop --once --json`, nvidia-smi's readings, `gputop validate`, a
# 12 s recording (the live view's collector, so its interval means) and a 5 s
# `gputop capture` (OUT/capture.toml: commit it under tests/scenarios/ as the machine's test
# scenario). bench/gpu-check.py then compares them and writes OUT/summary.txt; it exits
# non-zero when gputop misses the workload's process or disagrees with nvidia-smi on its
# memory. No timing is asserted. Needs the release binary: bash bench/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
sim=false
if [ "${1:-}" = "--sim" ]; then
  sim=true
  shift
fi
out=${1:-target/gpu-check}
mkdir -p "$out"
out=$(cd "$out" && pwd)
gputop=${GPUTOP:-target/release/gputop}
[ -x "$gputop" ] || { echo "gpu-check: $gputop is missing: run bash bench/build.sh" >&2; exit 2; }
if $sim; then
  # The simulator's library and nvidia-smi; the "workload" is a sleeping process that the
  # scenario says holds 2 GiB and bursts, as the real one would.
  lib=target/release/libnvml_sim.so
  [ -f "$lib" ] || { echo "gpu-check: $lib is missing: run bash bench/build.sh" >&2; exit 2; }
  cargo build --release --locked --quiet -p nvml-sim --bin nvidia-smi
  # Both gputop and the simulator's nvidia-smi load it as libnvidia-ml.so.1.
  mkdir -p "$out/sim-lib"
  cp "$lib" "$out/sim-lib/libnvidia-ml.so.1"
  export LD_LIBRARY_PATH="$out/sim-lib" PATH="$PWD/target/release:$PATH"
  export GPUTOP_SIM_SCENARIO="$out/sim-machine.toml"
  cat > "$GPUTOP_SIM_SCENARIO" <<'EOF'
[meta]
version = 1
name = "gpu-check --sim"
[sim]
samples_period_ms = 20
[[gpu]]
name = "NVIDIA H200"
memory_total = "141 GiB"
memory_base_used = "500 MiB"
[gpu.dynamic]
utilization_gpu = { keyframes = [[0, 100], [0.2, 0]], interp = "step", repeat = 2 }
power_mw = { keyframes = [[0, 450000], [0.2, 90000]], interp = "step", repeat = 2 }
temperature = 40
[[gpu.process]]
pid_env = "GPU_CHECK_PID"
used_memory = "2 GiB"
sm = { keyframes = [[0, 100], [0.2, 0]], interp = "step", repeat = 2 }
EOF
  sleep 60 &
  workload=$!
  export GPU_CHECK_PID=$workload
else
  python3 - <<'EOF' &
import time, torch
x = torch.randn(8192, 8192, device="cuda")
hold = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")  # 2 GiB resident
end = time.time() + 60
while time.time() < end:
    burst = time.time() + 0.2
    while time.time() < burst:
        y = x @ x
    torch.cuda.synchronize()
    time.sleep(1.8)
EOF
  workload=$!
fi
trap 'kill "$workload" 2>/dev/null || true' EXIT
echo "$workload" > "$out/workload.pid"
sleep 6  # the workload is up and the driver's buffer holds a few bursts

smi_gpu=index,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu
"$gputop" --once --json > "$out/once.json"
nvidia-smi --query-gpu="$smi_gpu" --format=csv,noheader,nounits > "$out/smi-gpu.csv"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits > "$out/smi-apps.csv"
nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1 || true
set +e
"$gputop" validate > "$out/validate.txt" 2>&1
echo "$?" > "$out/validate.rc"
set -e
rm -f "$out/live.rec" "$out/live.rec.1" "$out/capture.toml"
"$gputop" record "$out/live.rec" --interval 2 --duration 12 2> "$out/record.log"
"$gputop" replay "$out/live.rec" --once --json > "$out/live-last.json"
"$gputop" capture "$out/capture.toml" --duration 5 2> "$out/capture.log"
python3 bench/gpu-check.py "$out"
