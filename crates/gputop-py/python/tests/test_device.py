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

import pytest

from conftest import REPO


def test_devices_answer_what_the_command_prints(machine):
    import gputop

    devices = gputop.Device.all()
    assert gputop.Device.count() == len(devices) == len(machine["devices"])
    for device, printed in zip(devices, machine["devices"]):
        assert device.index == printed["index"]
        assert device.name() == printed["name"]
        assert device.uuid() == printed["uuid"]
        assert device.vendor() == printed["vendor"] == "nvidia"
        assert device.driver() == printed["driver"]
        assert device.driver_version() == printed["driver_version"] == machine["driver_version"]
        assert device.pci_bus_id() == printed["pci_bus_id"]
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
        assert device.total_energy_consumption() == round(printed["energy_joules"] * 1000)
        used, total = printed["memory_used_bytes"], printed["memory_total_bytes"]
        assert device.memory_percent() == round(used * 100 / total, 1)
        assert " / " in device.memory_usage()


def test_processes_are_keyed_by_pid_with_the_commands_figures(machine):
    # In a fresh interpreter: with the scenario's clock frozen, the driver's per-process
    # samples are new to the first reading only (as to the command's one-shot).
    code = (
        "import json, gputop\n"
        "print(json.dumps([[d.index, pid, p.pid, p.gpu_memory(), p.gpu_sm_utilization(), p.username(),\n"
        "                   p.cmdline(), p.name(), p.host_memory()]\n"
        "                  for d in gputop.Device.all() for pid, p in d.processes().items()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    read = json.loads(out.stdout)
    printed = {(p["gpu_index"], p["pid"]): p for p in machine["processes"]}
    assert {(gpu, pid) for gpu, pid, *_ in read} == set(printed)
    for gpu, key, pid, memory, sm, user, cmdline, name, host_memory in read:
        expected = printed[(gpu, key)]
        assert pid == key
        assert memory == expected["gpu_memory_bytes"]
        assert sm == expected["sm_percent"]
        assert user == expected["user"]
        assert cmdline == expected["command"].split(" ")
        assert name == "sleep"
        assert host_memory == expected["host_memory_bytes"]


def test_nvml_is_found_by_name_on_the_loader_path_as_a_driver_installs_it(machine, tmp_path):
    # As on a real machine: no library named, libnvidia-ml.so.1 found by the loader. (The
    # extension must not itself be named libnvidia-ml.so.1, or the loader would return it.)
    (tmp_path / "libnvidia-ml.so.1").symlink_to(os.environ["GPUTOP_NVML_LIB"])
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    del env["GPUTOP_NVML_LIB"]
    code = "import gputop\nprint(gputop.Device.count())\n"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(machine["devices"])


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
    code = (
        "import gputop\ngputop.demo()\n"
        "print(gputop.Device.count(), ','.join(d.vendor() for d in gputop.Device.all()), gputop.Device(0).name())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, vendors, name = out.stdout.split(" ", 2)
    assert int(count) >= 1 and name.strip(), out.stdout
    assert vendors == "nvidia,nvidia,nvidia,nvidia,amd,intel", out.stdout


@pytest.mark.parametrize(
    "example", ["processes_by_memory.py", "epoch_metrics.py", "inference_memory.py", "gpu_seconds_per_user.py"]
)
def test_the_examples_run(machine, example):
    path = REPO / "crates/gputop-py/examples" / example
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    if example == "processes_by_memory.py":
        assert lines[0].startswith("GPU 0: ") and " / " in lines[0], out.stdout
        assert sum(line.startswith("  ") for line in lines) == len(machine["processes"]), out.stdout
    elif example == "epoch_metrics.py":
        assert [line.split(":")[0] for line in lines] == ["epoch 0", "epoch 1", "epoch 2"], out.stdout
        assert "gpu:0/memory_used (MiB)/mean" in lines[0], out.stdout
    elif example == "inference_memory.py":
        assert "MiB" in lines[0] and "+0.0 MiB" in lines[0], out.stdout
    else:
        assert lines[0].startswith("over ") and "GPU-s" in lines[1], out.stdout


def test_the_module_leaves_its_host_processes_allocator_alone():
    """A training process imports the module: neither `mallopt` nor `malloc_trim` may be
    among the symbols its extension binds (only the gputop binary hands memory back)."""
    import gputop

    extension = gputop.gputop.__file__  # the package's extension module
    assert extension.endswith(".so"), extension
    symbols = subprocess.run(
        ["nm", "-D", "--undefined-only", extension], check=True, capture_output=True, text=True
    ).stdout
    bound = {line.split()[-1].split("@")[0] for line in symbols.splitlines() if line.strip()}
    assert "malloc" in bound or "free" in bound, f"nm read no allocator symbol of {extension}"
    assert not bound & {"mallopt", "malloc_trim"}, sorted(bound & {"mallopt", "malloc_trim"})
