"""Each VM role's Molecule scenario, as an operator runs it: create, converge, idempotence, verify,
destroy on a host rented on the test ground (molecule/shared). The runs start with the session, beside
the first ground modules (tests/ground/molecule_runs.py); these tests judge what they did."""

import os
import subprocess

import pytest

from tests.ground import molecule_runs
from tests.groundkit import REPO, require_ground

# Judged when the runs have ended: should the session have reached this module first (-k, a single
# file), the wait is the runs themselves, longer than the suite's 600 s per test.
pytestmark = pytest.mark.timeout(molecule_runs.TIMEOUT * 3)


@pytest.fixture(scope="module")
def runs(request) -> dict[str, subprocess.CompletedProcess]:
    require_ground()
    if not molecule_runs.installed():
        if os.environ.get("CI"):
            pytest.fail("molecule is not installed in the venv (make setup)")
        pytest.skip("molecule is not installed in the venv (make setup)")
    return request.config.stash[molecule_runs.KEY].results()


def test_every_vm_role_has_a_scenario():
    assert {"idle_killer", "bootstrap", "data_volume", "swarmui"} <= set(molecule_runs.SCENARIOS)
    # seed's scenario is swarmui's: it converges the whole VM playbook, which seeds last, with an extension
    scenario = REPO / "molecule" / "swarmui"
    assert "playbooks/bootstrap.yml" in (scenario / "converge.yml").read_text()
    assert "role: seed" in (REPO / "playbooks" / "bootstrap.yml").read_text()
    assert "gpu_rent_seed_extensions:" in (scenario / "molecule.yml").read_text()


@pytest.mark.parametrize("scenario", molecule_runs.SCENARIOS)
def test_the_scenario_passes(runs, scenario):
    result = runs[scenario]
    if result.returncode != 0:
        log = molecule_runs.log_path(scenario)
        # Ansible's log holds every stage (create and destroy too): read alone, a failure is not quoted twice
        output = log.read_text(errors="replace") if log.exists() else result.stdout + result.stderr
        failures = _failures(output)
        pytest.fail(f"molecule test -s {scenario} failed:\n{failures}\n...\n{result.stderr[-3000:]}")


def _failures(output: str) -> str:
    """The failed tasks' own lines (the tail alone is Molecule's clean-up)."""
    lines = output.splitlines()
    hits = [i for i, line in enumerate(lines) if "fatal:" in line or "FAILED!" in line or "failed:" in line]
    return "\n".join("\n".join(lines[max(i - 3, 0) : i + 12]) for i in hits[:3]) or "(no failed task in the output)"
