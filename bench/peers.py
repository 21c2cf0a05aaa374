#!/usr/bin/env python3
"""gputop beside nvitop, nvtop and gpustat on the same simulated machine.

Every tool reads the same simulated libnvidia-ml.so.1 (crates/nvml-sim) serving the same
scenario, with the same real sleeping processes. Measured per tool and scenario:

- one-shot: wall time and peak RSS of `gputop --once`, `nvitop -1`, `nvtop -s` (nvtop 3.2,
  built by peers.sh: Debian 12's 3.0.1 has no one-shot mode; without 3.2, 3.0.1's time to its
  first screen is shown instead), `gpustat`, median of several runs;
- interactive, in a 200x50 pseudo-terminal: CPU seconds per minute at a 1 s and a 0.25 s
  interval (nvtop counts in tenths of a second: 0.2 s), RSS at the end of the 1 s run and its
  peak (shown beside nvtop's one-shot peak),
  bytes written to the terminal per minute;
- NVML calls per second (the simulator's call trace, 1 s interval);
- keypress-to-screen latency of a sort key (median of 10).

Beside them runs the floor (bench/floor, `gputop-floor`): the NVML and /proc reads the main
screen needs, a sort of the rows, no drawing. gputop's ratio to it is what its own work
costs on top of the reads no viewer can skip.

The long runs of all tools go at the same time (CPU seconds are each process's own
counters); one-shots and latencies run one at a time. Prints a markdown table.

    python3 bench/peers.py [--minutes 10] [--short-minutes 1] [--smoke] [--before BINARY]

`--before` measures a gputop built from an earlier commit beside this one, in the same run
("gputop before"), so a change's cost is a ratio from one run, not two runs' difference.
"""

import argparse
import fcntl
import os
import pty
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-bench"
GPUTOP = ROOT / "target/release/gputop"
SIM = ROOT / "target/release/libnvml_sim.so"
# nvtop 3.2, built from source by peers.sh: Debian 12's nvtop (3.0.1) has no one-shot mode.
NVTOP_ONCE = ROOT / "target/bench-nvtop/nvtop"
# The least work the main screen needs (bench/floor), built by build.sh.
FLOOR = ROOT / "target/release/gputop-floor"
# A gputop built from an earlier commit (--before), measured as "gputop before".
BEFORE = None
TICK = os.sysconf("SC_CLK_TCK")
COLS, ROWS = 200, 50


def scenario(gpus, per_gpu, processes=None):
    """A scenario of `gpus` H100s with `per_gpu` real processes each (or `processes` in all,
    dealt to the GPUs in turn); process k is the k-th PID of GPUTOP_SIM_PIDS."""
    processes = gpus * per_gpu if processes is None else processes
    out = ["[meta]", "version = 1", f'name = "{gpus}x{processes}"', "seed = 7", ""]
    for g in range(gpus):
        out += [
            "[[gpu]]",
            'name = "NVIDIA H100 80GB HBM3"',
            f'uuid = "GPU-{g:08x}-0000-4000-8000-000000000000"',
            f"pci = {{ bus = {24 + g} }}",
            'memory_total = "80 GiB"',
            "power_limit_mw = 700000",
            "fans = 1",
            "[gpu.dynamic]",
            "utilization_gpu = { sine = { mean = 50, amplitude = 40, period = 9 } }",
            "utilization_memory = 30",
            "temperature = 60",
            "power_mw = { sine = { mean = 400000, amplitude = 200000, period = 11 } }",
            "fan_speed = 40",
        ]
        mine = range(g * per_gpu, (g + 1) * per_gpu) if processes == gpus * per_gpu else range(g, processes, gpus)
        for p, k in enumerate(mine):
            out += [
                "[[gpu.process]]",
                'pid_env = "GPUTOP_SIM_PIDS"',
                f"pid_index = {k}",
                'type = "C"',
                f'used_memory = "{64 + p} MiB"',
                "sm = { random = { min = 0, max = 100, hold = 0.5 } }",
            ]
        out.append("")
    return "\n".join(out)


def tools(simdir, interval):
    """Interactive command lines, per tool, at `interval` seconds."""
    lib = str(simdir / "libnvidia-ml.so.1")
    out = {"gputop": [str(GPUTOP), "--nvml-lib", lib, "--interval", f"{interval:g}"]}
    if BEFORE:
        out["gputop before"] = [str(BEFORE)] + out["gputop"][1:]
    if (VENV / "bin/nvitop").exists():
        out["nvitop"] = [str(VENV / "bin/nvitop"), "--monitor", "full", "--interval", f"{interval:g}"]
    if shutil.which("nvtop"):
        out["nvtop"] = ["nvtop", "-d", str(max(1, round(interval * 10)))]
    if FLOOR.exists():
        out["floor"] = [str(FLOOR), "--nvml-lib", lib, "--interval", f"{interval:g}"]
    return out


def one_shots(simdir):
    lib = str(simdir / "libnvidia-ml.so.1")
    out = {"gputop": [str(GPUTOP), "--once", "--nvml-lib", lib]}
    if BEFORE:
        out["gputop before"] = [str(BEFORE)] + out["gputop"][1:]
    if (VENV / "bin/nvitop").exists():
        out["nvitop"] = [str(VENV / "bin/nvitop"), "-1"]
    if NVTOP_ONCE.exists():
        out["nvtop"] = [str(NVTOP_ONCE), "-s"]
    if (VENV / "bin/gpustat").exists():
        out["gpustat"] = [str(VENV / "bin/gpustat")]
    return out


def env_for(simdir, scenario_path, pids, trace=None):
    env = dict(os.environ)
    env.update(
        LD_LIBRARY_PATH=str(simdir),
        GPUTOP_SIM_SCENARIO=str(scenario_path),
        GPUTOP_SIM_PIDS=" ".join(map(str, pids)),
        TERM="xterm-256color",
        COLUMNS=str(COLS),
        LINES=str(ROWS),
        HOME=str(simdir),
    )
    env.pop("GPUTOP_SIM_TRACE", None)
    if trace:
        env["GPUTOP_SIM_TRACE"] = str(trace)
    return env


def version_number(text):
    """`3.2.0` of `nvtop version 3.2.0 (-s)`; the text itself when it has no number."""
    return next((word for word in reversed(text.split()) if word[:1].isdigit()), text)


def run_once(command, env):
    """Wall seconds and peak RSS (KiB) of one run each way: timed on its own, then through GNU
    time for its peak RSS (a child forked from this Python process would count Python's own
    memory as its peak until it execs; timed through GNU time, a run would also count GNU
    time's own start, about 1.4 ms here)."""
    start = time.perf_counter()
    timed = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    measured = subprocess.run(
        ["/usr/bin/time", "-f", "%M", *command],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    for done in (timed, measured):
        if done.returncode != 0:
            raise RuntimeError(f"{command[0]} exited with {done.returncode}: {done.stderr[-300:]}")
    return wall, int(measured.stderr.strip().splitlines()[-1])


class Terminal:
    """A program in a 200x50 pseudo-terminal; counts what it writes."""

    def __init__(self, command, env):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        self.process = subprocess.Popen(
            command, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
        os.close(slave)
        self.bytes = 0
        self.last_output = time.perf_counter()
        self.first_output = None
        self.lock = threading.Lock()
        self.done = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while not self.done:
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if not ready:
                continue
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            now = time.perf_counter()
            with self.lock:
                self.bytes += len(data)
                self.last_output = now
                if self.first_output is None:
                    self.first_output = now

    def cpu_seconds(self):
        """CPU time of the process and all its threads: the scheduler's exact runtime
        (/proc/PID/task/*/schedstat, nanoseconds) where the kernel has it, else the clock-tick
        counts of /proc/PID/stat, which miss short bursts that start on a tick and end before
        the next (a periodic program's wake-ups do just that)."""
        try:
            total = 0
            for task in os.listdir(f"/proc/{self.process.pid}/task"):
                with open(f"/proc/{self.process.pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
            return total / 1e9
        except (OSError, ValueError, IndexError):
            with open(f"/proc/{self.process.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / TICK

    def rss_kib(self, field="VmRSS"):
        """Resident memory now, or at its highest (`VmHWM`)."""
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    def send(self, keys):
        os.write(self.master, keys)

    def close(self):
        self.done = True
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        os.close(self.master)


def steady(runs, warmup, minutes):
    """Starts every run at once; returns CPU s/min, bytes/min and final RSS per run."""
    terminals = {key: Terminal(command, env) for key, (command, env) in runs.items()}
    time.sleep(warmup)
    start = {k: (t.cpu_seconds(), t.bytes) for k, t in terminals.items()}
    began = time.perf_counter()
    time.sleep(minutes * 60)
    elapsed_min = (time.perf_counter() - began) / 60
    out = {}
    for key, t in terminals.items():
        cpu0, bytes0 = start[key]
        out[key] = {
            "cpu": (t.cpu_seconds() - cpu0) / elapsed_min,
            "bytes": (t.bytes - bytes0) / elapsed_min,
            "rss": t.rss_kib() / 1024,
            "peak_rss": t.rss_kib("VmHWM") / 1024,
        }
        t.close()
    return out


SORT_KEYS = {"gputop": b".", "gputop before": b".", "nvitop": b".", "nvtop": b"+"}


def keypress_latency(command, env, name, presses):
    """Median seconds from a sort key to the first byte drawn after it."""
    t = Terminal(command, env)
    time.sleep(4)
    samples = []
    for _ in range(presses):
        # Send right after a refresh has been drawn and the screen is quiet.
        deadline = time.perf_counter() + 5
        while time.perf_counter() < deadline:
            with t.lock:
                quiet = time.perf_counter() - t.last_output
            if 0.05 < quiet < 0.3:
                break
            time.sleep(0.005)
        with t.lock:
            before = t.bytes
        sent = time.perf_counter()
        t.send(SORT_KEYS[name])
        while time.perf_counter() - sent < 3:
            with t.lock:
                if t.bytes > before:
                    samples.append(t.last_output - sent)
                    break
            time.sleep(0.0005)
        time.sleep(0.3)
    first = t.first_output
    t.close()
    return (statistics.median(samples) if samples else None), first


def nvml_calls(runs, seconds):
    """NVML calls per second of each run (from the simulator's trace), after a warm-up."""
    terminals = {key: Terminal(command, env) for key, (command, env, _) in runs.items()}
    time.sleep(seconds + 3)
    for t in terminals.values():
        t.close()
    out = {}
    for key, (_, _, trace) in runs.items():
        stamps = []
        with open(trace) as f:
            for line in f:
                at = line.find('"t_ms":')
                if at >= 0:
                    stamps.append(float(line[at + 7 :].split(",")[0].split("}")[0]))
        if not stamps:
            out[key] = None
            continue
        start = min(stamps) + 3000
        window = [s for s in stamps if start <= s < start + seconds * 1000]
        out[key] = len(window) / seconds
    return out


def fmt(value, unit="", digits=2):
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}{unit}"


def ratio(mine, theirs):
    if mine is None or theirs in (None, 0):
        return ""
    return f" ({mine / theirs:.2f}x)"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10.0, help="the 1 s interval run")
    parser.add_argument("--short-minutes", type=float, default=1.0, help="the 0.25 s interval run")
    parser.add_argument("--runs", type=int, default=7, help="one-shot runs per tool")
    parser.add_argument("--smoke", action="store_true", help="tiny scenario, short runs (CI)")
    parser.add_argument("--before", type=Path, help="a gputop of an earlier commit, measured beside")
    args = parser.parse_args()
    global BEFORE
    BEFORE = args.before
    if args.smoke:
        args.minutes, args.short_minutes, args.runs = 0.05, 0.05, 2
    shapes = [("1 GPU, 4 processes", 1, 4)]
    if not args.smoke:
        shapes += [("8 GPUs, 64 processes", 8, 8), ("8 GPUs, 512 processes", 8, 64)]

    work = Path(tempfile.mkdtemp(prefix="gputop-peers-"))
    simdir = work / "sim"
    simdir.mkdir()
    shutil.copy(SIM, simdir / "libnvidia-ml.so.1")
    (simdir / "libnvidia-ml.so").symlink_to("libnvidia-ml.so.1")
    sleepers = [subprocess.Popen(["sleep", "100000"]) for _ in range(max(g * p for _, g, p in shapes))]
    pids = [s.pid for s in sleepers]
    try:
        scenarios = {}
        for label, gpus, per_gpu in shapes:
            path = work / f"{gpus}x{gpus * per_gpu}.toml"
            path.write_text(scenario(gpus, per_gpu))
            scenarios[label] = path

        results = {label: {} for label in scenarios}
        for label, path in scenarios.items():
            env = env_for(simdir, path, pids)
            for name, command in one_shots(simdir).items():
                samples = [run_once(command, env) for _ in range(args.runs)]
                results[label].setdefault(name, {})["once_ms"] = statistics.median(w for w, _ in samples) * 1000
                results[label][name]["once_rss"] = max(r for _, r in samples) / 1024

        for interval, minutes, key in [(1.0, args.minutes, "1s"), (0.25, args.short_minutes, "025s")]:
            runs = {}
            for label, path in scenarios.items():
                for name, command in tools(simdir, interval).items():
                    runs[(label, name)] = (command, env_for(simdir, path, pids))
            for (label, name), figures in steady(runs, 5, minutes).items():
                entry = results[label].setdefault(name, {})
                entry[f"cpu_{key}"] = figures["cpu"]
                if key == "1s":
                    entry["rss"] = figures["rss"]
                    entry["peak_rss"] = figures["peak_rss"]
                    entry["bytes"] = figures["bytes"]

        traced = {}
        for label, path in scenarios.items():
            for name, command in tools(simdir, 1.0).items():
                trace = work / f"trace-{name}-{len(traced)}.jsonl"
                traced[(label, name)] = (command, env_for(simdir, path, pids, trace), trace)
        for (label, name), calls in nvml_calls(traced, 5 if args.smoke else 20).items():
            results[label].setdefault(name, {})["calls"] = calls

        latency_label = list(scenarios)[-1 if args.smoke else 1]
        env = env_for(simdir, scenarios[latency_label], pids)
        for name, command in tools(simdir, 1.0).items():
            if name not in SORT_KEYS:
                continue
            latency, first = keypress_latency(command, env, name, 3 if args.smoke else 10)
            results[latency_label][name]["latency_ms"] = latency * 1000 if latency else None
            del first
        if shutil.which("nvtop") and not NVTOP_ONCE.exists():
            # No nvtop with a one-shot mode: the time from start to its first screen instead.
            for label, path in scenarios.items():
                firsts = []
                for _ in range(1 if args.smoke else 3):
                    t = Terminal(tools(simdir, 1.0)["nvtop"], env_for(simdir, path, pids))
                    started = time.perf_counter()
                    while t.first_output is None and time.perf_counter() - started < 10:
                        time.sleep(0.001)
                    firsts.append((t.first_output or started) - started)
                    t.close()
                results[label].setdefault("nvtop", {})["first_screen_ms"] = statistics.median(firsts) * 1000
    finally:
        for s in sleepers:
            s.kill()
        shutil.rmtree(work, ignore_errors=True)

    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True)
    print(f"Machine: {cpu.stdout.strip()}, {os.cpu_count()} cores. Runs: one-shot median of {args.runs}; "
          f"1 s interval for {args.minutes:g} min, 0.25 s for {args.short_minutes:g} min, all tools at once; "
          f"ratios are gputop / peer, from this run.\n")
    versions = {
        "gputop": subprocess.run([str(GPUTOP), "-V"], capture_output=True, text=True).stdout.strip(),
        "gputop before": f"gputop before: {BEFORE}" if BEFORE else "",
        "nvitop": subprocess.run([str(VENV / "bin/nvitop"), "--version"], capture_output=True, text=True).stdout.strip()
        if (VENV / "bin/nvitop").exists() else "missing",
        "nvtop": subprocess.run(["nvtop", "--version"], capture_output=True, text=True).stdout.strip()
        if shutil.which("nvtop") else "missing",
        "nvtop -s": subprocess.run([str(NVTOP_ONCE), "--version"], capture_output=True, text=True).stdout.strip()
        + " (-s)" if NVTOP_ONCE.exists() else "nvtop -s: missing",
        "gpustat": subprocess.run([str(VENV / "bin/gpustat"), "--version"], capture_output=True, text=True).stdout.strip()
        if (VENV / "bin/gpustat").exists() else "missing",
    }
    print("Versions: " + "; ".join(f"{v}" for v in versions.values() if v) + "\n")
    for label, by_tool in results.items():
        g = by_tool.get("gputop", {})
        print(f"### {label}\n")
        print("| tool | one-shot | peak RSS one-shot | CPU s/min @1s | CPU s/min @0.25s | RSS after run | "
              "terminal bytes/min | NVML calls/s | sort key latency |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for name in ["gputop", "gputop before", "nvitop", "nvtop", "gpustat", "floor"]:
            f = by_tool.get(name)
            if not f:
                continue
            mine = name == "gputop"
            once = f.get("once_ms")
            once_text = fmt(once, " ms", 1) + ("" if mine else ratio(g.get("once_ms"), once))
            # The versions of the nvtop run interactively and of the one measured with -s.
            live_nvtop, once_nvtop = version_number(versions["nvtop"]), version_number(versions["nvtop -s"])
            if name == "nvtop" and once is not None:
                once_text = f"{once_nvtop} -s: " + once_text
            elif name == "nvtop":
                once_text = f"no -s in {live_nvtop}; first screen {fmt(f.get('first_screen_ms'), ' ms', 0)}" + ratio(
                    g.get("once_ms"), f.get("first_screen_ms"))
            once_rss_text = fmt(f.get("once_rss"), " MiB", 1) + ("" if mine else ratio(g.get("once_rss"), f.get("once_rss")))
            if name == "nvtop" and f.get("once_rss") is not None:
                once_rss_text = f"{once_nvtop} -s: {once_rss_text}; {live_nvtop}'s run peak {fmt(f.get('peak_rss'), ' MiB', 1)}"
            elif name == "nvtop":
                # No one-shot: its peak over the whole 1 s run stands in.
                once_rss_text = f"none; peak of its run {fmt(f.get('peak_rss'), ' MiB', 1)}" + ratio(
                    g.get("once_rss"), f.get("peak_rss"))
            cells = [
                name,
                once_text,
                once_rss_text,
                fmt(f.get("cpu_1s"), "", 3) + ("" if mine else ratio(g.get("cpu_1s"), f.get("cpu_1s"))),
                fmt(f.get("cpu_025s"), "", 3) + ("" if mine else ratio(g.get("cpu_025s"), f.get("cpu_025s"))),
                fmt(f.get("rss"), " MiB", 1) + ("" if mine else ratio(g.get("rss"), f.get("rss"))),
                fmt(f.get("bytes"), "", 0) + ("" if mine else ratio(g.get("bytes"), f.get("bytes"))),
                fmt(f.get("calls"), "", 1) + ("" if mine else ratio(g.get("calls"), f.get("calls"))),
                fmt(f.get("latency_ms"), " ms", 1),
            ]
            print("| " + " | ".join(cells) + " |")
        floor = by_tool.get("floor")
        if floor and g:
            print(f"\ngputop / floor: CPU {fmt(g.get('cpu_1s') / floor['cpu_1s'] if floor.get('cpu_1s') else None)}x "
                  f"at 1 s, {fmt(g.get('cpu_025s') / floor['cpu_025s'] if floor.get('cpu_025s') else None)}x at 0.25 s; "
                  f"NVML calls {fmt(g.get('calls'))} against {fmt(floor.get('calls'))} a second.")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
