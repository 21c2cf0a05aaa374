#!/usr/bin/env python3
"""The fleet view at scale: `gputop --prometheus` against a real Prometheus holding the series
of a large fleet, backfilled into its TSDB (`promtool tsdb create-blocks-from openmetrics`).

The series are those `gputop export --processes` serves (labelled as a scrape labels them:
`job`, `instance`, and target labels `cluster` and `rack`): per node `up`; per GPU
`gputop_gpu_info`, `_utilization_ratio` (an hour of history, for the idle times),
`_memory_used_bytes`, `_memory_total_bytes`, `_processes`; per process
`gputop_process_gpu_memory_bytes`, `_sm_utilization_ratio`; per user on a node
`gputop_user_processes`, `_gpus`, `_gpu_memory_bytes`. A quarter of the GPUs are idle. The
samples reach 30 minutes past the start, so instant queries find them while it runs; `up`
has one every 15 s (a ServiceMonitor's default), so gputop refreshes every 15 s.

Between gputop and Prometheus sits a counting proxy: bytes gputop reads and the time each
refresh's queries take (from the first request of a burst to the last answer). Measured:

- one-shot `--once --json` (median of 5): wall time, peak RSS, bytes read;
- the live screen in a 200x50 pseudo-terminal at `--interval 5` (raised to the 15 s scrape
  interval) for `--minutes`: gputop's CPU
  seconds per minute, RSS and its peak, bytes read per refresh, the queries' time per
  refresh; Prometheus' CPU seconds per minute alongside.

    python3 bench/fleet.py [--nodes 2000] [--gpus 8] [--processes 16] [--minutes 2] [--smoke]

`--processes` is per GPU. Prints a markdown table.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import Terminal  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GPUTOP = ROOT / "target/release/gputop"
WORK = ROOT / "target/bench-fleet"
USERS = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]


def write_openmetrics(path, nodes, gpus, per_gpu, start):
    """The fleet's series, family by family, from an hour before `start` to 30 min after."""
    step = 240
    history = range(int(start) - 3600, int(start) + 1800, step)
    recent = range(int(start) - 240, int(start) + 1800, step)
    # `up` as a 15 s scrape writes it: gputop reads the scrape interval from its samples.
    scraped = range(int(start) - 600, int(start) + 1800, 15)
    instances = [f"gpu-{n:04d}.example:9835" for n in range(nodes)]

    def target(n):
        return f'job="gputop",instance="{instances[n]}",cluster="c{n % 4}",rack="r{n // 40}"'

    def idle(n, g):
        return (n * gpus + g) % 4 == 0

    with open(path, "w") as out:
        def family(name, series, times):
            out.write(f"# TYPE {name} gauge\n")
            for labels, value in series:
                out.writelines(f"{name}{{{labels}}} {value} {t}\n" for t in times)

        family("up", ((target(n), 1) for n in range(nodes)), scraped)
        family(
            "gputop_gpu_info",
            (
                (f'{target(n)},gpu="{g}",uuid="GPU-{n:04d}-{g}",name="NVIDIA H100 80GB HBM3",vendor="nvidia",driver="nvidia"', 1)
                for n in range(nodes)
                for g in range(gpus)
            ),
            recent,
        )
        gpu = lambda n, g: f'{target(n)},gpu="{g}",uuid="GPU-{n:04d}-{g}",name="NVIDIA H100 80GB HBM3",vendor="nvidia",driver="nvidia"'  # noqa: E731
        family(
            "gputop_gpu_utilization_ratio",
            ((gpu(n, g), 0 if idle(n, g) else 0.5 + (g % 5) / 10) for n in range(nodes) for g in range(gpus)),
            history,
        )
        family("gputop_gpu_memory_total_bytes", ((gpu(n, g), 85899345920) for n in range(nodes) for g in range(gpus)), recent)
        family(
            "gputop_gpu_memory_used_bytes",
            ((gpu(n, g), 0 if idle(n, g) else 40e9 + g * 1e9) for n in range(nodes) for g in range(gpus)),
            recent,
        )
        family(
            "gputop_gpu_processes",
            ((gpu(n, g), 0 if idle(n, g) else per_gpu) for n in range(nodes) for g in range(gpus)),
            recent,
        )

        def processes():
            for n in range(nodes):
                for g in range(gpus):
                    if idle(n, g):
                        continue
                    for p in range(per_gpu):
                        pid = 10000 + g * per_gpu + p
                        user = USERS[(n + g + p) % len(USERS)]
                        yield n, g, pid, user, (2e9 + (n * 7 + g * 3 + p) % 97 * 1e8)

        family(
            "gputop_process_gpu_memory_bytes",
            (
                (f'{target(n)},gpu="{g}",uuid="GPU-{n:04d}-{g}",vendor="nvidia",driver="nvidia",pid="{pid}",user="{user}",container="-"', memory)
                for n, g, pid, user, memory in processes()
            ),
            recent,
        )
        family(
            "gputop_process_sm_utilization_ratio",
            (
                (f'{target(n)},gpu="{g}",uuid="GPU-{n:04d}-{g}",vendor="nvidia",driver="nvidia",pid="{pid}",user="{user}",container="-"', 0.3)
                for n, g, pid, user, _ in processes()
            ),
            recent,
        )
        per_user = {}
        for n, g, _, user, memory in processes():
            entry = per_user.setdefault((n, user), [0, set(), 0])
            entry[0] += 1
            entry[1].add(g)
            entry[2] += memory
        for name, pick in [
            ("gputop_user_processes", lambda e: e[0]),
            ("gputop_user_gpus", lambda e: len(e[1])),
            ("gputop_user_gpu_memory_bytes", lambda e: e[2]),
        ]:
            family(name, ((f'{target(n)},user="{u}"', pick(e)) for (n, u), e in sorted(per_user.items())), recent)
        out.write("# EOF\n")


class Proxy:
    """Forwards 127.0.0.1:port to Prometheus; counts the bytes answered and times each
    connection (gputop makes one a query)."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(256)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.answered = 0
        self.spans = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            client, _ = self.listener.accept()
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        began = time.perf_counter()
        server = socket.create_connection(("127.0.0.1", self.upstream))

        def pump(source, sink, count):
            total = 0
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
                    total += len(data)
            except OSError:
                pass
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            if count:
                with self.lock:
                    self.answered += total

        up = threading.Thread(target=pump, args=(client, server, False), daemon=True)
        up.start()
        pump(server, client, True)
        up.join(1)
        client.close()
        server.close()
        with self.lock:
            self.spans.append((began, time.perf_counter()))

    def take(self):
        with self.lock:
            answered, spans = self.answered, self.spans
            self.answered, self.spans = 0, []
        return answered, spans


def bursts(spans, gap=1.0):
    """Connections grouped into refreshes (a pause of `gap` s between them): each's span."""
    out = []
    for began, ended in sorted(spans):
        if out and began - out[-1][1] < gap:
            out[-1][1] = max(out[-1][1], ended)
        else:
            out.append([began, ended])
    return [ended - began for began, ended in out]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=16, help="per GPU")
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--smoke", action="store_true", help="20 nodes, 20 s: the harness runs")
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.minutes = 20, 0.5
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    start = time.time()
    data = WORK / "fleet.om"
    t = time.perf_counter()
    write_openmetrics(data, args.nodes, args.gpus, args.processes, start)
    print(f"series written in {time.perf_counter() - t:.0f} s ({data.stat().st_size >> 20} MiB)", file=sys.stderr)
    t = time.perf_counter()
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(data), str(WORK / "tsdb")],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    data.unlink()
    print(f"blocks made in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    (WORK / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    web = socket.socket()
    web.bind(("127.0.0.1", 0))
    web_port = web.getsockname()[1]
    web.close()
    prometheus = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={WORK / 'prometheus.yml'}",
            f"--storage.tsdb.path={WORK / 'tsdb'}",
            "--storage.tsdb.retention.time=10y",
            f"--web.listen-address=127.0.0.1:{web_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 300
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{web_port}/-/ready", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("Prometheus never got ready")
            time.sleep(0.5)
        proxy = Proxy(web_port)
        url = f"http://127.0.0.1:{proxy.port}"
        command = [str(GPUTOP), "--prometheus", url, "--prometheus-selector", '{job="gputop"}']
        once = []
        for _ in range(5):
            began = time.perf_counter()
            child = subprocess.Popen(command + ["--once", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, err = child.communicate()
            wall = time.perf_counter() - began
            if child.returncode != 0:
                raise RuntimeError(f"gputop --once failed: {err.decode()[-300:]}")
            answered, _ = proxy.take()
            once.append((wall, answered, out))
        fleet = json.loads(once[-1][2])
        summary = fleet["summary"]
        # Peak RSS of one one-shot: getrusage of a child that ran only it.
        rss = subprocess.run(
            [sys.executable, "-c", "import resource,subprocess,sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"] + command + ["--once", "--json"],
            capture_output=True, text=True, check=True,
        )
        once_rss = int(rss.stdout.strip()) / 1024
        proxy.take()
        env = dict(os.environ, TERM="xterm-256color", HOME=str(WORK))
        terminal = Terminal(command + ["--interval", "5"], env)
        time.sleep(15)
        proxy.take()
        cpu0, prom0 = terminal.cpu_seconds(), cpu_seconds(prometheus.pid)
        began = time.perf_counter()
        time.sleep(args.minutes * 60)
        minutes = (time.perf_counter() - began) / 60
        cpu = (terminal.cpu_seconds() - cpu0) / minutes
        prom_cpu = (cpu_seconds(prometheus.pid) - prom0) / minutes
        answered, spans = proxy.take()
        rss_now, rss_peak = terminal.rss_kib() / 1024, terminal.rss_kib("VmHWM") / 1024
        terminal.close()
        refreshes = bursts(spans)
        print(
            f"\nFleet: {args.nodes} nodes x {args.gpus} GPUs x {args.processes} processes a GPU "
            f"(gputop saw {summary['nodes']} nodes, {summary['gpus']} GPUs, {summary['gpus_idle']} idle, "
            f"{summary['processes']} processes)\n"
        )
        print("| | figure |")
        print("|---|---|")
        print(f"| one-shot `--once --json`, wall (median of 5) | {statistics.median(w for w, _, _ in once):.2f} s |")
        print(f"| one-shot peak RSS | {once_rss:.1f} MiB |")
        print(f"| one-shot bytes read from Prometheus | {statistics.median(a for _, a, _ in once) / 1e6:.2f} MB |")
        print(f"| live: refreshes in {minutes:.1f} min | {len(refreshes)} |")
        if refreshes:
            print(f"| live: queries' time a refresh (median, max) | {statistics.median(refreshes):.2f} s, {max(refreshes):.2f} s |")
            print(f"| live: bytes read a refresh | {answered / len(refreshes) / 1e6:.2f} MB |")
        print(f"| live: gputop CPU | {cpu:.2f} s/min |")
        print(f"| live: gputop RSS (end, peak) | {rss_now:.1f} MiB, {rss_peak:.1f} MiB |")
        print(f"| live: Prometheus CPU answering | {prom_cpu:.2f} s/min |")
    finally:
        prometheus.terminate()
        prometheus.wait(30)
        shutil.rmtree(WORK, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
