"""ResourceMetricCollector on the simulated machine with a frozen clock: every sample is the
same reading, so each metric's mean, min, max and last equal `gputop --once --json`'s value;
tags nest, stop and clear; the context manager and daemonize work. The statistics of varying
samples (time-weighted means) are checked on known sequences in the library
(src/monitor/spans.rs).
"""

import os
import threading
import time

import gputop


def test_collect_gives_nvitops_keys_with_the_readings_statistics(machine):
    collector = gputop.ResourceMetricCollector(interval=0.05).start(tag="train")
    time.sleep(0.3)
    metrics = collector.collect()
    collector.stop()
    for printed in machine["devices"]:
        gpu = f"train/gpu:{printed['index']}"
        used_mib = printed["memory_used_bytes"] / 2**20
        for stat in ("mean", "min", "max", "last"):
            assert metrics[f"{gpu}/memory_used (MiB)/{stat}"] == used_mib
            assert metrics[f"{gpu}/temperature (C)/{stat}"] == printed["temperature_celsius"]
            assert metrics[f"{gpu}/gpu_utilization (%)/{stat}"] == printed["utilization_gpu_percent"]
            assert abs(metrics[f"{gpu}/power_usage (W)/{stat}"] - printed["power_usage_watts"]) < 1e-9
    assert 0.25 < metrics["train/duration (s)"] < 5
    assert abs(metrics["train/timestamp"] - time.time()) < 5
    assert metrics["train/last_timestamp"] <= metrics["train/timestamp"]
    assert any(k.startswith("train/host/memory_used (GiB)/") for k in metrics)


def test_tags_nest_and_stop_and_clear(machine):
    collector = gputop.ResourceMetricCollector(devices=[gputop.Device(0)], interval=0.05)
    collector.start("run")
    collector.start("epoch")
    time.sleep(0.15)
    keys = collector.collect()
    # As nvitop's: a tag opened inside another is prefixed by it.
    assert "run/gpu:0/temperature (C)/mean" in keys and "run/epoch/gpu:0/temperature (C)/mean" in keys
    assert not any(k.startswith("run/gpu:1/") for k in keys), "only the devices asked for"
    collector.stop("epoch")
    assert not any(k.startswith("run/epoch/") for k in collector.collect())
    collector.clear()
    assert "run/gpu:0/temperature (C)/mean" not in collector.collect()
    collector.stop()
    assert collector.collect() == {}


def test_a_context_manager_and_a_daemon(machine):
    with gputop.ResourceMetricCollector(interval=0.05) as collector:
        time.sleep(0.12)
        assert "metrics/gpu:0/memory_total (MiB)/max" in collector.collect()
    assert collector.collect() == {}
    seen = []
    done = threading.Event()

    def on_collect(metrics):
        seen.append(metrics)
        if len(seen) == 3:
            done.set()
            return False
        return True

    daemon = gputop.ResourceMetricCollector(interval=0.05)
    daemon.daemonize(on_collect, interval=0.1)
    assert done.wait(5), "on_collect was called three times"
    time.sleep(0.3)
    assert len(seen) == 3, "returning False stops it"
    assert all("metrics/gpu:0/temperature (C)/last" in m for m in seen[1:])


def test_usage_counts_gpu_seconds_per_user(machine):
    import pwd

    me = pwd.getpwuid(os.getuid()).pw_name
    with gputop.ResourceMetricCollector(interval=0.1) as collector:
        time.sleep(1.0)
        usage = collector.usage()
    mine = usage["users"][me]
    held = {p["gpu_index"] for p in machine["processes"]}
    assert sorted(mine.gpus) == sorted(held)
    assert mine.processes == len(machine["processes"])
    assert mine.gpu_memory == sum(p["gpu_memory_bytes"] for p in machine["processes"])
    # Each GPU held counts one second per second sampled.
    assert abs(mine.gpu_seconds - len(held) * usage["seconds"]) < 1e-6
    assert 0.7 < usage["seconds"] < 2.0
