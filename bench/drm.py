#!/usr/bin/env python3
"""The cost of reading AMD and Intel GPUs through DRM, beside NVML's for as many processes.

A fake machine (`drm::fixture`, written by `cargo bench --bench core -- --write-drm-machine`):
a /proc of 1000 processes with 10 fds each, 50 of which hold 3 DRM fds on 4 GPUs (two AMD,
an xe and an i915 GPU), and their /sys. Three `gputop export --processes --interval 1` run
at the same time on it, scraped every 5 s:

- NVML: the simulated libnvidia-ml.so.1 with 4 GPUs and the same 50 processes, no DRM GPU;
- DRM: the 4 DRM GPUs and their 50 processes, no NVML;
- both: the two together (8 GPUs).

All three read the same /proc (--path.procfs). Printed: CPU seconds per minute and resident
memory of each. The simulator answers an NVML call with a function call, where a real
driver makes an ioctl into the kernel, so the NVML figure is a floor for a real machine.

    python3 bench/drm.py [--minutes 2]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import exporter  # noqa: E402  (the exporters' runner: CPU accounting and scrapes)
import peers  # noqa: E402

HOLDERS = [1000 + 20 * k for k in range(50)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=2.0, help="minutes the three run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gputop-drm-bench-"))
    try:
        subprocess.run(["cargo", "bench", "--quiet", "--locked", "--bench", "core", "--",
                        "--write-drm-machine", str(work / "machine")], check=True, cwd=peers.ROOT)
        simdir = work / "sim"
        simdir.mkdir()
        shutil.copy(peers.SIM, simdir / "libnvidia-ml.so.1")
        # The NVML GPUs' processes are the fake machine's 50 GPU holders.
        (work / "scenario.toml").write_text(peers.scenario(4, 0, processes=len(HOLDERS)))
        (work / "no-sys").mkdir()
        proc, sys_with, sys_without = work / "machine/proc", work / "machine/sys", work / "no-sys"
        no_nvml = str(work / "no-libnvidia-ml.so.1")
        sim = str(simdir / "libnvidia-ml.so.1")
        shapes = {"NVML": (sim, sys_without), "DRM": (no_nvml, sys_with), "both": (sim, sys_with)}
        runs = {}
        for name, (lib, sysfs) in shapes.items():
            port = exporter.free_port()
            command = [str(peers.GPUTOP), "--nvml-lib", lib, "--path.procfs", str(proc), "--path.sysfs",
                       str(sysfs), "export", "--processes", "--interval", "1",
                       "--web-listen-address", f"127.0.0.1:{port}"]
            env = dict(os.environ, GPUTOP_SIM_SCENARIO=str(work / "scenario.toml"), HOME=str(work / name),
                       GPUTOP_SIM_PIDS=" ".join(map(str, HOLDERS)))
            runs[name] = (command, env, f"http://127.0.0.1:{port}/metrics")
        figures, started = exporter.run(runs, args.minutes)
        for process in started.values():
            process.kill()
            process.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True,
                         text=True)
    print(f"Machine: {cpu.stdout.strip()}, {os.cpu_count()} cores; {args.minutes:g} min, the three at once.\n")
    print("| gputop export --processes, 1 s | CPU s/min | RSS | /metrics size |")
    print("| --- | --- | --- | --- |")
    labels = {"NVML": "NVML (simulated): 4 GPUs, 50 processes", "DRM": "DRM: 4 GPUs, 50 processes",
              "both": "both: 8 GPUs, 100 processes"}
    for name, label in labels.items():
        f = figures[name]
        print(f"| {label} | {f['cpu']:.3f} | {f['rss']:.1f} MiB | {f['bytes'] / 1024:.0f} KiB |")
    drm, nvml, both = figures["DRM"]["cpu"], figures["NVML"]["cpu"], figures["both"]["cpu"]
    print(f"\nDRM / NVML: {drm / nvml:.2f}x; the DRM source added to NVML's: +{both - nvml:.3f} s/min.")


if __name__ == "__main__":
    main()
