#!/usr/bin/env python3
"""`gputop export` beside nvitop-exporter on the same simulated machine.

Both read the same simulated libnvidia-ml.so.1 (crates/nvml-sim) serving the same scenario
of bench/peers.py (8 H100s, real sleeping processes), collect every second, and are scraped
every 5 s, as a Prometheus would, all at the same time. Measured per exporter and shape:

- CPU seconds per minute (user and system time of all its threads, exited ones included);
- resident memory at the end;
- scrape latency of those scrapes (median and slowest; the exporters take turns at being
  scraped first) and the page's size;
- for gputop alone: the latency of 100 concurrent scrapes, in five bursts (the median of
  their medians, and the slowest).

gputop runs with --processes, since nvitop-exporter serves per-process series by default.
With --baseline PATH, a second gputop binary (an earlier build) runs beside them, so a change
is measured before and after in the same run.

    python3 bench/exporter.py [--minutes 5] [--smoke] [--baseline PATH]
"""

import argparse
import concurrent.futures
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (the same machine, scenarios and CPU accounting as the viewers')

SCRAPE_EVERY = 5.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exporters(lib, ports, baseline=None):
    def gputop(binary, port):
        return [str(binary), "--nvml-lib", lib, "export", "--processes", "--interval", "1",
                "--web-listen-address", f"127.0.0.1:{port}"]

    nvitop = [str(peers.VENV / "bin/nvitop-exporter"), "--bind-address", "127.0.0.1",
              "--port", str(ports["nvitop-exporter"]), "--interval", "1"]
    out = {"gputop": gputop(peers.GPUTOP, ports["gputop"]), "nvitop-exporter": nvitop}
    if baseline:
        out["baseline"] = gputop(baseline, ports["baseline"])
    return out


def cpu_seconds(pid):
    """CPU time of the process, the threads that have exited included (/proc/PID/stat's
    user and system clock ticks): a server with a thread per connection leaves no trace in
    /proc/PID/task once its threads are gone, so summing their schedstat counted only the
    threads alive at the end."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / peers.TICK


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def scrape(url):
    """Seconds one scrape of `url` took, and the page's size in bytes."""
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        size = len(response.read())
    return time.perf_counter() - start, size


def wait_serving(url, process, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the exporter exited with {process.returncode}")
        try:
            _, size = scrape(url)
            if size > 0:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} never answered")


def run(runs, minutes):
    """Starts every exporter at once, scrapes each every 5 s; returns their figures."""
    started = {}
    for key, (command, env, url) in runs.items():
        started[key] = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for key, (_, _, url) in runs.items():
            wait_serving(url, started[key])
        time.sleep(5)
        cpu0 = {key: cpu_seconds(p.pid) for key, p in started.items()}
        began = time.perf_counter()
        latencies = {key: [] for key in runs}
        sizes = {}
        order = list(runs)
        while time.perf_counter() - began < minutes * 60:
            round_start = time.perf_counter()
            # The first scrape after the sleep also pays this client's own wake-up: each
            # exporter takes its turn at going first.
            for key in order:
                seconds, size = scrape(runs[key][2])
                latencies[key].append(seconds)
                sizes[key] = size
            order = order[1:] + order[:1]
            time.sleep(max(0.0, SCRAPE_EVERY - (time.perf_counter() - round_start)))
        elapsed = (time.perf_counter() - began) / 60
        out = {}
        for key, process in started.items():
            out[key] = {
                "cpu": (cpu_seconds(process.pid) - cpu0[key]) / elapsed,
                "rss": rss_mib(process.pid),
                "median_ms": statistics.median(latencies[key]) * 1000,
                "max_ms": max(latencies[key]) * 1000,
                "bytes": sizes[key],
                "scrapes": len(latencies[key]),
            }
        return out, started
    except BaseException:
        for process in started.values():
            process.kill()
        raise


# Bursts of concurrent scrapes per gputop build.
BURSTS = 5


def concurrent_scrapes(url, count=100):
    """Median and slowest of `count` scrapes started at once, in ms."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        times = list(pool.map(lambda _: scrape(url)[0], range(count)))
    return statistics.median(times) * 1000, max(times) * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5.0, help="minutes each shape runs")
    parser.add_argument("--smoke", action="store_true", help="1 GPU, 4 processes, 20 s (CI)")
    parser.add_argument("--baseline", type=Path, help="another gputop binary to run beside (before a change)")
    args = parser.parse_args()
    shapes = [("8 GPUs, 64 processes", 8, 8), ("8 GPUs, 512 processes", 8, 64)]
    if args.smoke:
        shapes, args.minutes = [("1 GPU, 4 processes", 1, 4)], 0.34

    work = Path(tempfile.mkdtemp(prefix="gputop-exporters-"))
    simdir = work / "sim"
    simdir.mkdir()
    shutil.copy(peers.SIM, simdir / "libnvidia-ml.so.1")
    (simdir / "libnvidia-ml.so").symlink_to("libnvidia-ml.so.1")
    sleepers = [subprocess.Popen(["sleep", "100000"]) for _ in range(max(g * p for _, g, p in shapes))]
    pids = [s.pid for s in sleepers]
    results = {}
    try:
        for label, gpus, per_gpu in shapes:
            path = work / f"{gpus}x{gpus * per_gpu}.toml"
            path.write_text(peers.scenario(gpus, per_gpu))
            ports = {"gputop": free_port(), "nvitop-exporter": free_port(), "baseline": free_port()}
            runs = {}
            for name, command in exporters(str(simdir / "libnvidia-ml.so.1"), ports, args.baseline).items():
                env = peers.env_for(simdir, path, pids)
                env["HOME"] = str(work / name)
                runs[name] = (command, env, f"http://127.0.0.1:{ports[name]}/metrics")
            figures, started = run(runs, args.minutes)
            try:
                # Five bursts each, taking turns: one burst's latency is mostly how the client's
                # 100 threads were scheduled that time.
                tools = [name for name in ("gputop", "baseline") if name in runs]
                bursts = {name: [] for name in tools}
                for turn in range(BURSTS):
                    for name in tools[turn % len(tools):] + tools[: turn % len(tools)]:
                        bursts[name].append(concurrent_scrapes(runs[name][2]))
                for name, each in bursts.items():
                    figures[name]["concurrent"] = (
                        statistics.median(median for median, _ in each),
                        max(slowest for _, slowest in each),
                    )
            finally:
                for process in started.values():
                    process.kill()
                    process.wait()
            results[label] = figures
    finally:
        for s in sleepers:
            s.kill()
        shutil.rmtree(work, ignore_errors=True)

    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True)
    gputop_version = subprocess.run([str(peers.GPUTOP), "-V"], capture_output=True, text=True).stdout.strip()
    nvitop_version = subprocess.run([str(peers.VENV / "bin/nvitop-exporter"), "--version"], capture_output=True,
                                    text=True).stdout.strip()
    print(f"Machine: {cpu.stdout.strip()}, {os.cpu_count()} cores. Both exporters collect every 1 s and are "
          f"scraped every {SCRAPE_EVERY:g} s for {args.minutes:g} min, at the same time; ratios are gputop / "
          f"nvitop-exporter.\n")
    print(f"Versions: {gputop_version}; {nvitop_version}\n")
    if args.baseline:
        print(f"Baseline: {args.baseline} (its row's ratios are gputop / baseline)\n")
    for label, by_tool in results.items():
        g, n = by_tool["gputop"], by_tool["nvitop-exporter"]
        print(f"### {label}\n")
        print("| exporter | CPU s/min | RSS | scrape median | scrape slowest | /metrics size |")
        print("| --- | --- | --- | --- | --- | --- |")
        rows = [("gputop export --processes", g), ("nvitop-exporter", n)]
        if "baseline" in by_tool:
            rows.append(("baseline gputop", by_tool["baseline"]))
        for name, f in rows:
            mine = f is g
            cells = [
                name,
                peers.fmt(f["cpu"], "", 3) + ("" if mine else peers.ratio(g["cpu"], f["cpu"])),
                peers.fmt(f["rss"], " MiB", 1) + ("" if mine else peers.ratio(g["rss"], f["rss"])),
                peers.fmt(f["median_ms"], " ms", 2) + ("" if mine else peers.ratio(g["median_ms"], f["median_ms"])),
                peers.fmt(f["max_ms"], " ms", 2),
                f"{f['bytes'] / 1024:.0f} KiB",
            ]
            print("| " + " | ".join(cells) + " |")
        for name in ("gputop", "baseline"):
            if name in by_tool:
                median, slowest = by_tool[name]["concurrent"]
                print(f"\n{name}, 100 concurrent scrapes: median {median:.1f} ms, slowest {slowest:.1f} ms.")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
