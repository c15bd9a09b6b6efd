"""Each VM role's Molecule scenario, as an operator runs it: create, converge, idempotence, verify,
destroy on a host rented on the test ground (molecule/shared). Two run side by side: each rents a
host of its own, and most of a scenario is waiting on SSH and the cloud."""

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.groundkit import REPO, require_ground

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


@pytest.fixture(scope="module")
def runs() -> dict[str, subprocess.CompletedProcess]:
    require_ground()
    if shutil.which("molecule", path=str(BIN)) is None:
        if os.environ.get("CI"):
            pytest.fail("molecule is not installed in the venv (make setup)")
        pytest.skip("molecule is not installed in the venv (make setup)")
    with ThreadPoolExecutor(SIDE_BY_SIDE) as pool:
        return dict(zip(SCENARIOS, pool.map(_molecule, SCENARIOS), strict=True))


def test_every_vm_role_has_a_scenario():
    assert {"idle_killer", "bootstrap", "data_volume", "swarmui", "seed"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_scenario_passes(runs, scenario):
    result = runs[scenario]
    assert result.returncode == 0, f"{_failures(result.stdout + result.stderr)}\n...\n{result.stderr[-3000:]}"


def _failures(output: str) -> str:
    """The failed tasks' own lines (the tail alone is Molecule's clean-up)."""
    lines = output.splitlines()
    hits = [i for i, line in enumerate(lines) if "fatal:" in line or "FAILED!" in line or "failed:" in line]
    return "\n".join("\n".join(lines[max(i - 3, 0) : i + 12]) for i in hits[:3]) or "(no failed task in the output)"
