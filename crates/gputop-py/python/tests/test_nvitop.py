"""Beside nvitop itself, on the same simulated machine at a frozen time: gputop's Device API
answers what nvitop's does, and the examples written against nvitop's API print the same
with either import. nvitop finds the simulator by name on the loader path, as it finds a
driver's library. .ci/all-tests installs nvitop from PyPI.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("nvitop", reason="nvitop is not installed here (.ci/all-tests installs it)")

READ = """
import json
from {module} import Device
out = []
for d in Device.all():
    out.append({{
        "device": [d.name(), d.uuid(), d.memory_total(), d.memory_used(), d.memory_free(),
                   d.memory_usage(), d.memory_percent(), d.gpu_utilization(),
                   d.memory_utilization(), d.temperature(), d.power_usage(), d.power_limit(),
                   d.fan_speed(), d.total_energy_consumption()],
        "processes": {{str(pid): [p.gpu_memory(), p.gpu_memory_human(), p.username(), p.name(),
                                  p.cmdline()]
                      for pid, p in sorted(d.processes().items())}},
    }})
print(json.dumps(out))
"""


@pytest.fixture
def loader_path(machine, tmp_path):
    """The environment in which both find the simulated libnvidia-ml.so.1 by name."""
    (tmp_path / "libnvidia-ml.so.1").symlink_to(os.environ["GPUTOP_NVML_LIB"])
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    del env["GPUTOP_NVML_LIB"]
    return env


def run(code, env):
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_device_api_answers_what_nvitops_does(loader_path):
    ours = json.loads(run(READ.format(module="gputop"), loader_path))
    theirs = json.loads(run(READ.format(module="nvitop"), loader_path))
    assert len(ours) == len(theirs) == 2
    for mine, nvitops in zip(ours, theirs):
        assert mine["device"] == nvitops["device"]
        assert mine["processes"] == nvitops["processes"]
    assert any(gpu["processes"] for gpu in ours), "the scenario's processes were read"


@pytest.mark.parametrize("example", ["processes_by_memory.py", "epoch_metrics.py", "inference_memory.py"])
def test_the_examples_print_the_same_with_nvitops_import(loader_path, example):
    code = (REPO / "crates/gputop-py/examples" / example).read_text()
    assert "from gputop import" in code
    ours = run(code, loader_path)
    theirs = run(code.replace("from gputop import", "from nvitop import"), loader_path)
    assert ours == theirs and ours.strip(), f"gputop:\n{ours}\nnvitop:\n{theirs}"
