"""Each VM role's Molecule scenario, as an operator runs it: create, converge, idempotence, verify,
destroy on a host rented on the test ground (molecule/shared)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.groundkit import REPO, require_ground

BIN = Path(sys.executable).parent
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


def test_every_vm_role_has_a_scenario():
    assert {"bootstrap", "data_volume", "swarmui", "seed"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_scenario_passes(scenario):
    require_ground()
    if shutil.which("molecule", path=str(BIN)) is None:
        if os.environ.get("CI"):
            pytest.fail("molecule is not installed in the venv (make setup)")
        pytest.skip("molecule is not installed in the venv (make setup)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "GPU_RENT_", "MOLECULE_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        [str(BIN / "molecule"), "test", "-s", scenario],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
