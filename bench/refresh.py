#!/usr/bin/env python3
"""What one steady refresh costs, counted in what does not vary from run to run: NVML calls
and heap allocations (blocks and bytes), for gputop's live view in a 200x50 pseudo-terminal
and for the floor program (bench/floor), on the simulated machine of bench/peers.py.

Each program runs twice under valgrind's DHAT with the simulator's call trace on, a short
and a long time; a refresh is a call of GPU 0's compute-process list. The two runs'
difference, divided by their difference in refreshes, leaves out start-up and shutdown.

    python3 bench/refresh.py [--smoke]
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (the same machine and scenarios as the viewers')


def refreshes_and_calls(trace):
    """Refreshes (GPU 0's compute-process list calls) and NVML calls in a trace."""
    refreshes = calls = 0
    with open(trace) as f:
        for line in f:
            entry = json.loads(line)
            calls += 1
            if entry["sym"].startswith("nvmlDeviceGetComputeRunningProcesses") and entry["gpu"] == 0:
                refreshes += 1
    return refreshes, calls


def heap_totals(dhat_out):
    """Blocks and bytes allocated over a whole DHAT run by the program itself: allocations
    made inside the simulated libnvidia-ml (its own bookkeeping and call trace) are left out,
    as a real driver's are not the program's."""
    with open(dhat_out) as f:
        data = json.load(f)
    frames = data["ftbl"]
    simulator = {i for i, frame in enumerate(frames) if "libnvidia-ml" in frame}
    own = [pp for pp in data["pps"] if not simulator.intersection(pp["fs"])]
    # DHAT's "tbk" is the blocks allocated at a site, "tb" their bytes.
    return sum(pp["tbk"] for pp in own), sum(pp["tb"] for pp in own)


def run(name, shape, command, env, seconds, work):
    """One run of `command` under DHAT for `seconds`: its refreshes, NVML calls, blocks, bytes."""
    tag = f"{name}-{shape}-{seconds}".replace(" ", "_")
    out = work / f"dhat-{tag}.json"
    # A file of its own: the simulator appends to its trace, and a trace shared with another
    # shape's run would count that run's refreshes as well.
    trace = work / f"trace-{tag}.jsonl"
    env = dict(env, GPUTOP_SIM_TRACE=str(trace))
    wrapped = ["valgrind", "--tool=dhat", f"--dhat-out-file={out}", "-q", *command]
    terminal = peers.Terminal(wrapped, env)
    time.sleep(seconds)
    terminal.close()
    deadline = time.monotonic() + 30
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return (*refreshes_and_calls(trace), *heap_totals(out))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="1 GPU, 4 processes, short runs (CI)")
    args = parser.parse_args()
    shapes = [("8 GPUs, 64 processes", 8, 8), ("8 GPUs, 512 processes", 8, 64)]
    short, long = 15, 45
    if args.smoke:
        shapes, short, long = [("1 GPU, 4 processes", 1, 4)], 8, 14
    if not shutil.which("valgrind"):
        sys.exit("bench/refresh.py needs valgrind (apt-get install valgrind)")

    work = Path(tempfile.mkdtemp(prefix="gputop-refresh-"))
    simdir = work / "sim"
    simdir.mkdir()
    shutil.copy(peers.SIM, simdir / "libnvidia-ml.so.1")
    (simdir / "libnvidia-ml.so").symlink_to("libnvidia-ml.so.1")
    lib = str(simdir / "libnvidia-ml.so.1")
    programs = {
        "gputop": [str(peers.GPUTOP), "--nvml-lib", lib, "--interval", "1"],
        "floor": [str(peers.FLOOR), "--nvml-lib", lib, "--interval", "1"],
    }
    sleepers = [subprocess.Popen(["sleep", "100000"]) for _ in range(max(g * p for _, g, p in shapes))]
    pids = [s.pid for s in sleepers]
    rows = []
    try:
        for label, gpus, per_gpu in shapes:
            path = work / f"{gpus}x{gpus * per_gpu}.toml"
            path.write_text(peers.scenario(gpus, per_gpu))
            env = peers.env_for(simdir, path, pids)
            for name, command in programs.items():
                shape = f"{gpus}x{gpus * per_gpu}"
                a = run(name, shape, command, env, short, work)
                b = run(name, shape, command, env, long, work)
                refreshes = b[0] - a[0]
                if refreshes <= 0:
                    raise RuntimeError(f"{name}: no more refreshes in the long run ({a[0]} and {b[0]})")
                per = [(y - x) / refreshes for x, y in zip(a[1:], b[1:])]
                rows.append((label, name, refreshes, *per))
    finally:
        for s in sleepers:
            s.kill()
        shutil.rmtree(work, ignore_errors=True)

    version = subprocess.run([str(peers.GPUTOP), "-V"], capture_output=True, text=True).stdout.strip()
    print(f"Per steady refresh, from two runs under DHAT ({short} s and {long} s) at a 1 s interval; {version}.\n")
    print("| shape | program | refreshes compared | NVML calls | allocations | bytes allocated |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, name, refreshes, calls, blocks, total in rows:
        print(f"| {label} | {name} | {refreshes} | {calls:.1f} | {blocks:.0f} | {total / 1024:.1f} KiB |")
    print("\nAllocations made inside the simulated NVML library are not counted.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
