"""ResourceMetricCollector on the simulated machine with a frozen clock: every sample is the
same reading, so each metric's mean, min, max and last equal `gputop --once --json`'s value;
tags nest, stop and clear; the context managers and daemonize work as nvitop's; the GPU
processes descended from root_pids have their own metrics. The statistics of varying
samples (time-weighted means) are checked on known sequences in the library
(src/monitor/spans.rs).
"""

import os
import threading
import time

import pytest

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
    # Cleared: the statistics start over from now. A reading may follow at once (collect
    # takes one when the last is older than the 0.05 s interval), so the time is what shows it.
    before = collector.collect()["run/duration (s)"]
    cleared_at = time.time()
    collector.clear()
    after = collector.collect()["run/duration (s)"]
    assert before >= 0.15 and after <= time.time() - cleared_at, (before, after)
    collector.stop()
    # As nvitop's: misuse is a RuntimeError that says what.
    with pytest.raises(RuntimeError, match="not been started"):
        collector.collect()
    with pytest.raises(RuntimeError, match="not been started"):
        collector.stop("run")
    collector.start("run")
    with pytest.raises(RuntimeError, match='already started with tag "run"'):
        collector.start("run")
    collector.stop()


def test_context_managers_and_a_daemon(machine):
    collector = gputop.ResourceMetricCollector(interval=0.05)
    with collector(tag="train"):
        with collector(tag="epoch"):
            time.sleep(0.12)
            keys = collector.collect()
            assert "train/epoch/gpu:0/memory_total (MiB)/max" in keys
            assert "train/gpu:0/memory_total (MiB)/max" in keys
        assert not any(k.startswith("train/epoch/") for k in collector.collect())
    with pytest.raises(RuntimeError):
        collector.collect()
    with gputop.ResourceMetricCollector(interval=0.05) as shorthand:
        assert "metrics/gpu:0/memory_total (MiB)/max" in shorthand.collect()

    seen, events = [], []
    done = threading.Event()

    def on_collect(metrics):
        seen.append(metrics)
        if len(seen) == 3:
            return False
        return True

    def on_stop(c):
        events.append(("stop", c))
        done.set()

    daemon = gputop.ResourceMetricCollector(interval=0.05)
    thread = daemon.daemonize(
        on_collect, interval=0.1, on_start=lambda c: events.append(("start", c)), on_stop=on_stop
    )
    assert isinstance(thread, threading.Thread) and thread.daemon
    assert thread.name == "metrics-daemon" and thread.collector is daemon
    assert done.wait(5), "on_collect returned False the third time"
    thread.join(5)
    assert not thread.is_alive()
    assert len(seen) == 3, "returning False stops it"
    assert [e for e, _ in events] == ["start", "stop"] and all(c is daemon for _, c in events)
    assert all("metrics-daemon/gpu:0/temperature (C)/last" in m for m in seen)
    with pytest.raises(RuntimeError):
        daemon.collect()
    idle = daemon.daemonize(lambda m: False, start=False)
    assert not idle.is_alive(), "start=False returns the thread unstarted"


def _pids(metrics):
    return {int(k.split("/")[1][4:]) for k in metrics if k.split("/")[1].startswith("pid:")}


def test_processes_descended_from_root_pids_have_their_own_metrics(machine):
    sleepers = {p["pid"] for p in machine["processes"]}
    # The sleepers are this process's children: the default root_pids is this process.
    with gputop.ResourceMetricCollector(interval=0.05) as collector:
        metrics = collector.collect()
    assert _pids(metrics) == sleepers
    for p in machine["processes"]:
        own = f"metrics/pid:{p['pid']}"
        gpu = f"{own}/gpu:{p['gpu_index']}"
        assert metrics[f"{gpu}/gpu_memory (MiB)/mean"] == p["gpu_memory_bytes"] / 2**20
        # The frozen clock gives the driver no new utilization sample after the first
        # reading, which gputop reads as no kernel run: 0 (test_device checks the value).
        assert 0 <= metrics[f"{gpu}/gpu_sm_utilization (%)/max"] <= 100
        assert metrics[f"{gpu}/gpu_memory_percent (%)/last"] > 0
        assert f"{own}/host/host_memory (MiB)/mean" in metrics
        assert f"{own}/host/cpu_percent (%)/last" in metrics
        # As nvitop's: the running time is its maximum alone.
        assert f"{own}/host/running_time (min)" in metrics
        assert f"{own}/host/running_time (min)/mean" not in metrics
    with gputop.ResourceMetricCollector(root_pids=[], interval=0.05) as none:
        assert _pids(none.collect()) == set()
    one = sorted(sleepers)[0]
    with gputop.ResourceMetricCollector(root_pids={one}, interval=0.05) as itself:
        assert _pids(itself.collect()) == {one}, "a root is its own descendant"
    with gputop.ResourceMetricCollector(root_pids={1}, interval=0.05) as everyone:
        assert _pids(everyone.collect()) == sleepers


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
