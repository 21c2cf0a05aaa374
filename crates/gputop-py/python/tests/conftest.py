"""The simulated machine the tests read: the two-GPU scenario at a frozen time, its GPU
processes three real sleeping processes, and what `gputop --once --json` prints of it."""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
SCENARIO = REPO / "tests/scenarios/two-gpus-training.toml"


@pytest.fixture(scope="session")
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


