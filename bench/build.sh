#!/usr/bin/env bash
# The release gputop, the floor program (bench/floor) and the simulator
# (target/release/libnvml_sim.so), as the benchmarks use them. One at a time: built
# together, they would share their dependencies' features (the simulator's C exports are a
# feature gputop's own build leaves off).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet -p gputop
cargo build --release --locked --quiet -p gputop-floor
cargo build --release --locked --quiet -p nvml-sim
[ -f target/release/libnvml_sim.so ] || cp target/release/deps/libnvml_sim.so target/release/
