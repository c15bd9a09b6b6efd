"""Each VM role's Molecule scenario, as an operator runs it: create, converge, idempotence, verify,
destroy on a host rented on the test ground (molecule/shared).

The scenarios start in the background as soon as the test session has collected this module
(conftest.py), two side by side, and run while the other ground tests do: each rents hosts of its
own on m1.small (no GPU slot, untouched by the pool tests' sold-out GPUs), and most of a scenario is
waiting on SSH and the cloud. These tests run last and collect the results."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.groundkit import REPO, ground_missing, require_ground

BIN = Path(sys.executable).parent
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
SIDE_BY_SIDE = 2


def _molecule(scenario: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "GPU_RENT_", "MOLECULE_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [str(BIN / "molecule"), "test", "-s", scenario],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip


def start_in_background() -> dict[str, Future] | None:
    """Start every scenario (two at a time); None when molecule or the ground is missing."""
    if shutil.which("molecule", path=str(BIN)) is None or ground_missing() is not None:
        return None
    pool = ThreadPoolExecutor(SIDE_BY_SIDE, thread_name_prefix="molecule")
    futures = {scenario: pool.submit(_molecule, scenario) for scenario in SCENARIOS}
    pool.shutdown(wait=False)
    return futures


@pytest.fixture(scope="module")
def runs(request) -> dict[str, Future]:
    require_ground()
    if shutil.which("molecule", path=str(BIN)) is None:
        if os.environ.get("CI"):
            pytest.fail("molecule is not installed in the venv (make setup)")
        pytest.skip("molecule is not installed in the venv (make setup)")
    started = request.config.stash.get(MOLECULE_RUNS, None)
    return started if started is not None else start_in_background()


MOLECULE_RUNS = pytest.StashKey[dict]()


def test_every_vm_role_has_a_scenario():
    assert {"idle_killer", "bootstrap", "data_volume", "swarmui", "seed"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_scenario_passes(runs, scenario):
    result = runs[scenario].result()
    assert result.returncode == 0, f"{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
