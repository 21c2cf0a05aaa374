#!/usr/bin/env python3
"""gputop's Python module beside nvitop's API, on the same simulated machine.

Both read the same simulated libnvidia-ml.so.1 (crates/nvml-sim) serving bench/peers.py's
scenario of 8 GPUs with 64 real sleeping processes; each tool runs in its own Python
process, from the same interpreter (.venv-bench). Measured:

- reads: the time to read `memory_used()`, `gpu_utilization()`, `temperature()` and
  `power_usage()` of every GPU (the devices from `Device.all()`, made once), median of
  several rounds 60 ms apart (gputop answers a field from a reading for 50 ms, so each
  round reads the driver again), the CPU kept busy between them as a training loop keeps it;
- collector: the CPU seconds of a process running `ResourceMetricCollector(interval=0.5)`
  (every GPU, the default root_pids) for a minute, from a tag's `start()` to its
  `collect()` at the end; the tools run at the same time.

    python3 bench/api.py [--seconds 60] [--rounds 200] [--smoke]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (the scenario, the simulator and its environment)

PYTHON = peers.VENV / "bin/python"
TOOLS = ("gputop", "nvitop")


def worker(tool, mode, seconds, rounds):
    """In the measured process: one tool, one measurement; prints its figures as JSON."""
    api = __import__(tool)
    if mode == "reads":
        devices = api.Device.all()

        def read():
            for d in devices:
                d.memory_used(), d.gpu_utilization(), d.temperature(), d.power_usage()

        read()
        times = []
        for _ in range(rounds):
            # Busy, as a training loop keeps the CPU between two reads: asleep, the first
            # call of a round would time the core waking up.
            idle_until = time.perf_counter() + 0.06
            while time.perf_counter() < idle_until:
                pass
            start = time.perf_counter()
            read()
            times.append(time.perf_counter() - start)
        print(json.dumps({"ms": statistics.median(times) * 1000, "gpus": len(devices)}))
    else:
        collector = api.ResourceMetricCollector(interval=0.5)
        cpu = time.process_time()
        collector.start(tag="bench")
        time.sleep(seconds)
        metrics = collector.collect()
        collector.stop()
        cpu = time.process_time() - cpu
        print(json.dumps({"cpu_s": cpu, "keys": len(metrics)}))


def spawn(tool, mode, env, seconds, rounds):
    command = [str(PYTHON), __file__, "--worker", tool, mode, f"--seconds={seconds}", f"--rounds={rounds}"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(process, tool):
    out, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{tool} exited with {process.returncode}: {err[-500:]}")
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0, help="the collector's run")
    parser.add_argument("--rounds", type=int, default=200, help="rounds of reads")
    parser.add_argument("--smoke", action="store_true", help="1 GPU, short runs (CI)")
    parser.add_argument("--worker", nargs=2, metavar=("TOOL", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker, args.seconds, args.rounds)
        return
    gpus, per_gpu = (1, 4) if args.smoke else (8, 8)
    if args.smoke:
        args.seconds, args.rounds = 2.0, 5

    work = Path(tempfile.mkdtemp(prefix="gputop-api-"))
    simdir = work / "sim"
    simdir.mkdir()
    shutil.copy(peers.SIM, simdir / "libnvidia-ml.so.1")
    (simdir / "libnvidia-ml.so").symlink_to("libnvidia-ml.so.1")
    sleepers = [subprocess.Popen(["sleep", "100000"]) for _ in range(gpus * per_gpu)]
    try:
        path = work / "machine.toml"
        path.write_text(peers.scenario(gpus, per_gpu))
        env = peers.env_for(simdir, path, [s.pid for s in sleepers])
        reads = {tool: result(spawn(tool, "reads", env, args.seconds, args.rounds), tool) for tool in TOOLS}
        running = {tool: spawn(tool, "collector", env, args.seconds, args.rounds) for tool in TOOLS}
        collected = {tool: result(p, tool) for tool, p in running.items()}
    finally:
        for s in sleepers:
            s.kill()
            s.wait()
        shutil.rmtree(work, ignore_errors=True)

    versions = subprocess.run(
        [str(PYTHON), "-c", "import importlib.metadata as m; print(m.version('nvitop'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(f"{gpus} GPUs, {gpus * per_gpu} processes; nvitop {versions}\n")
    print("| | gputop | nvitop | gputop / nvitop |")
    print("|---|---|---|---|")
    mine, theirs = reads["gputop"]["ms"], reads["nvitop"]["ms"]
    print(f"| 4 readings of every GPU, ms (median of {args.rounds}) | {mine:.3f} | {theirs:.3f} | 1/{theirs / mine:.1f} |")
    mine, theirs = collected["gputop"]["cpu_s"], collected["nvitop"]["cpu_s"]
    print(
        f"| collector at 0.5 s for {args.seconds:g} s, CPU s | {mine:.3f} | {theirs:.3f} | "
        f"1/{theirs / mine:.1f} |"
    )
    for tool in TOOLS:
        if collected[tool]["keys"] == 0:
            raise RuntimeError(f"{tool}'s collector gave no metrics")


if __name__ == "__main__":
    main()
