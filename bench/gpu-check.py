#!/usr/bin/env python3
"""Compares what bench/gpu-check.sh gathered: gputop's one-shot, its live means (the last
frame of a recording) and `gputop validate` beside nvidia-smi, for GPU 0 and the workload's
process. Writes OUT/summary.txt and prints it. Exits 1 when gputop does not list the
workload's process or its GPU memory differs from nvidia-smi's by more than 5 %."""

import json
import sys
from pathlib import Path


def gpu0(doc):
    return next(d for d in doc["devices"] if d["index"] == 0)


def main(out: Path) -> int:
    once = json.loads((out / "once.json").read_text())
    live = json.loads((out / "live-last.json").read_text())
    pid = int((out / "workload.pid").read_text())
    smi = [line.split(", ") for line in (out / "smi-gpu.csv").read_text().splitlines() if line]
    apps = {
        int(fields[0]): float(fields[1])
        for fields in (line.split(", ") for line in (out / "smi-apps.csv").read_text().splitlines())
        if len(fields) == 2 and fields[0].strip().isdigit()
    }
    index, util, mem_used, mem_total, power, temp = smi[0][:6]
    mib = 1 << 20
    rows = [
        ("driver", once.get("driver_version"), ""),
        ("GPU 0", gpu0(once)["name"], ""),
        ("utilization now %", gpu0(once)["utilization_gpu_percent"], util),
        ("utilization mean % (one-shot)", gpu0(once)["utilization_gpu_mean_percent"], ""),
        ("utilization peak % (one-shot)", gpu0(once)["utilization_gpu_peak_percent"], ""),
        ("utilization mean % (live)", gpu0(live)["utilization_gpu_mean_percent"], ""),
        ("utilization peak % (live)", gpu0(live)["utilization_gpu_peak_percent"], ""),
        ("memory used MiB", (gpu0(once)["memory_used_bytes"] or 0) / mib, mem_used),
        ("memory total MiB", (gpu0(once)["memory_total_bytes"] or 0) / mib, mem_total),
        ("power W", gpu0(once)["power_usage_watts"], power),
        ("power mean W (live)", gpu0(live)["power_usage_mean_watts"], ""),
        ("temperature C", gpu0(once)["temperature_celsius"], temp),
    ]
    mine = [p for p in once["processes"] if p["pid"] == pid]
    failures = []
    if not mine:
        failures.append(f"gputop does not list the workload (PID {pid})")
    else:
        ours = (mine[0]["gpu_memory_bytes"] or 0) / mib
        theirs = apps.get(pid)
        rows.append((f"PID {pid} GPU memory MiB", ours, theirs if theirs is not None else "not listed"))
        rows.append((f"PID {pid} %SM (one-shot)", mine[0]["sm_percent"], ""))
        if theirs is not None and abs(ours - theirs) > 0.05 * max(theirs, 1.0):
            failures.append(f"PID {pid}: gputop {ours:.0f} MiB, nvidia-smi {theirs:.0f} MiB")
    validate_rc = (out / "validate.rc").read_text().strip()
    lines = [f"{'reading':34} {'gputop':>22} {'nvidia-smi':>12}"]
    for name, ours, theirs in rows:
        ours = f"{ours:.1f}" if isinstance(ours, float) else str(ours)
        lines.append(f"{name:34} {ours:>22} {str(theirs):>12}")
    lines.append(f"gputop validate exit code: {validate_rc} (details in validate.txt)")
    lines.append("workload: 2 GiB held, 200 ms of matrix products every 2 s (about 10 % busy)")
    lines.extend(f"FAILED: {f}" for f in failures)
    text = "\n".join(lines) + "\n"
    (out / "summary.txt").write_text(text)
    print(text, end="")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "target/gpu-check")))
