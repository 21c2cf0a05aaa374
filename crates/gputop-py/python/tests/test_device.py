"""The gputop module against `gputop --once --json` on the same simulated machine, with real
spawned processes: every value the module returns is the one the command prints, unknown
values are None, and a missing driver raises gputop.GpuTopError with the command's message.

Run by .ci/all-tests, which builds the wheel, installs it in a fresh virtualenv and sets
GPUTOP_TEST_BIN (the gputop binary) and GPUTOP_NVML_LIB (the simulated libnvidia-ml.so.1).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
SCENARIO = REPO / "tests/scenarios/two-gpus-training.toml"


@pytest.fixture(scope="module")
def machine():
    """Three sleeping processes as the scenario's GPU processes; the command's report of them
    and the environment the module reads the same simulated machine with."""
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(3)]
    env = dict(os.environ)
    env.update(
        GPUTOP_SIM_SCENARIO=str(SCENARIO),
        GPUTOP_SIM_PIDS=" ".join(str(p.pid) for p in sleepers),
        GPUTOP_SIM_CLOCK="manual",
        GPUTOP_SIM_TIME_MS="100000",
    )
    report = subprocess.run(
        [os.environ["GPUTOP_TEST_BIN"], "--nvml-lib", os.environ["GPUTOP_NVML_LIB"], "--once", "--json"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    os.environ.update(env)
    yield json.loads(report.stdout)
    for sleeper in sleepers:
        sleeper.kill()
        sleeper.wait()


def test_devices_answer_what_the_command_prints(machine):
    import gputop

    devices = gputop.Device.all()
    assert gputop.Device.count() == len(devices) == len(machine["devices"])
    for device, printed in zip(devices, machine["devices"]):
        assert device.index == printed["index"]
        assert device.name() == printed["name"]
        assert device.uuid() == printed["uuid"]
        assert gputop.Device(uuid=printed["uuid"]) == device
        assert device.memory_total() == printed["memory_total_bytes"]
        assert device.memory_used() == printed["memory_used_bytes"]
        assert device.memory_free() == printed["memory_free_bytes"]
        assert device.gpu_utilization() == printed["utilization_gpu_percent"]
        assert device.memory_utilization() == printed["utilization_memory_percent"]
        assert device.temperature() == printed["temperature_celsius"]
        assert device.fan_speed() == printed["fan_speed_percent"]
        # nvitop's units: milliwatts.
        assert device.power_usage() == round(printed["power_usage_watts"] * 1000)
        assert device.power_limit() == round(printed["power_limit_watts"] * 1000)
        used, total = printed["memory_used_bytes"], printed["memory_total_bytes"]
        assert device.memory_percent() == round(used * 100 / total, 1)
        assert " / " in device.memory_usage()


def test_processes_are_keyed_by_pid_with_the_commands_figures(machine):
    import gputop

    for device in gputop.Device.all():
        printed = {p["pid"]: p for p in machine["processes"] if p["gpu_index"] == device.index}
        processes = device.processes()
        assert set(processes) == set(printed)
        for pid, process in processes.items():
            assert process.pid == pid
            assert process.gpu_memory() == printed[pid]["gpu_memory_bytes"]
            assert process.gpu_sm_utilization() == printed[pid]["sm_percent"]
            assert process.username() == printed[pid]["user"]
            assert process.cmdline() == printed[pid]["command"].split(" ")
            assert process.name() == "sleep"
            assert process.host_memory() == printed[pid]["host_memory_bytes"]


def test_a_missing_library_raises_gputop_error_saying_what_to_do():
    code = "import gputop\ntry:\n    gputop.Device.count()\nexcept gputop.GpuTopError as e:\n    print(e)\n"
    env = dict(os.environ, GPUTOP_NVML_LIB="/nonexistent/libnvidia-ml.so.1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "libnvidia-ml.so.1" in out.stdout and "--demo" in out.stdout, out.stdout


def test_unknown_values_are_none():
    code = (
        "import gputop\n"
        "d = gputop.Device(0)\n"
        "print(d.fan_speed() is None, d.power_usage() is None, gputop.NA is None)\n"
    )
    env = dict(os.environ, GPUTOP_SIM_SCENARIO=str(REPO / "tests/scenarios/faults-fan-power-unsupported.toml"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"], out.stdout + out.stderr


def test_the_demo_machine():
    code = "import gputop\ngputop.demo()\nprint(gputop.Device.count(), gputop.Device(0).name())\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, name = out.stdout.split(" ", 1)
    assert int(count) >= 1 and name.strip(), out.stdout
