#!/usr/bin/env bash
# Measures `gputop export` on the simulated 8 GPUs x 64 processes (real sleeping processes):
# scrape latency (sequential and 100 concurrent), CPU seconds per minute idle and while
# scraped every second, and resident memory. Prints a markdown table. Needs curl.
#   bash bench/exporter.sh            # about 2.5 minutes
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p gputop -p nvml-sim
bin=target/release/gputop
lib=target/release/deps/libnvml_sim.so
[ -f "$lib" ] || lib=$(ls target/release/libnvml_sim.so)
port=$((20000 + RANDOM % 20000))
pids=()
for _ in $(seq 64); do sleep 3600 & pids+=("$!"); done
cleanup() { kill "${pids[@]}" "${exporter:-}" 2>/dev/null || true; }
trap cleanup EXIT
GPUTOP_SIM_SCENARIO=tests/scenarios/eight-gpus-64-processes.toml GPUTOP_SIM_PIDS="${pids[*]}" \
  "$bin" --nvml-lib "$lib" export --processes --web-listen-address "127.0.0.1:$port" 2>/dev/null &
exporter=$!
until curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null; do sleep 0.1; done
url="http://127.0.0.1:$port/metrics"
cpu() { awk '{print $14 + $15}' "/proc/$exporter/stat"; }
tick=$(getconf CLK_TCK)
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p99() { sort -n | awk '{a[NR]=$1} END {print a[int(NR*0.99)]}'; }

seq_times=$(for _ in $(seq 200); do curl -s -o /dev/null -w '%{time_total}\n' "$url"; done)
seq_median=$(echo "$seq_times" | median); seq_p99=$(echo "$seq_times" | p99)
con_times=$(seq 100 | xargs -P 100 -I{} curl -s -o /dev/null -w '%{time_total}\n' "$url")
con_median=$(echo "$con_times" | median); con_max=$(echo "$con_times" | sort -n | tail -1)
bytes=$(curl -s "$url" | wc -c)

c0=$(cpu); sleep 60; c1=$(cpu)
idle=$(echo "($c1 - $c0) / $tick" | bc -l)
c0=$(cpu); for _ in $(seq 60); do curl -s -o /dev/null "$url"; sleep 1; done; c1=$(cpu)
scraped=$(echo "($c1 - $c0) / $tick" | bc -l)
rss=$(awk '/VmRSS/ {print $2}' "/proc/$exporter/status")

echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
echo
echo "| gputop export, 8 GPUs x 64 processes, --processes, 2 s collection | value |"
echo "| --- | --- |"
printf '| /metrics size | %s bytes |\n' "$bytes"
printf '| scrape latency, 200 sequential: median / p99 | %.2f ms / %.2f ms |\n' "$(echo "$seq_median*1000" | bc -l)" "$(echo "$seq_p99*1000" | bc -l)"
printf '| scrape latency, 100 concurrent: median / slowest | %.2f ms / %.2f ms |\n' "$(echo "$con_median*1000" | bc -l)" "$(echo "$con_max*1000" | bc -l)"
printf '| CPU per minute, not scraped | %.2f s |\n' "$idle"
printf '| CPU per minute, scraped every second | %.2f s |\n' "$scraped"
printf '| resident memory after the runs | %.1f MiB |\n' "$(echo "$rss/1024" | bc -l)"
