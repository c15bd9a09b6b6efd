"""Every VM role's Molecule scenario, run in the background from the start of the session.

The suite alone leaves about a quarter of the machine's two cores idle, so the scenarios run
beside the first ground modules (two side by side, each on an m1.small host of its own: no GPU slot
is taken from the other tests) instead of after them; test_molecule.py judges the results. The one
test that takes a cloud API away (test_faults.py, Neutron) waits for them first, so no scenario meets
that outage.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.groundkit import REPO

BIN = Path(sys.executable).parent
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
SIDE_BY_SIDE = 2
TIMEOUT = 1500  # one scenario, create to destroy
KEY = pytest.StashKey["Background"]()  # the session's runs, in config.stash
# Molecule prints nothing of its create and destroy playbooks: Ansible's own log keeps every stage
LOGS = Path(tempfile.gettempdir()) / "gpu-rent-molecule"


def log_path(scenario: str) -> Path:
    return LOGS / f"{scenario}.log"


def run(scenario: str) -> subprocess.CompletedProcess:
    # stdin a /dev/null of its own: the suite's stdin is shared with every ssh a test starts, and ssh sets
    # it non-blocking while it runs; an ansible-playbook starting then refuses ("requires blocking IO")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "GPU_RENT_", "MOLECULE_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    LOGS.mkdir(exist_ok=True)
    log_path(scenario).unlink(missing_ok=True)
    env["ANSIBLE_LOG_PATH"] = str(log_path(scenario))
    return subprocess.run(
        [str(BIN / "molecule"), "test", "-s", scenario],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip


def installed() -> bool:
    return shutil.which("molecule", path=str(BIN)) is not None


class Background:
    """The scenarios' runs, started once; results() and wait() block until all have ended."""

    def __init__(self) -> None:
        self.pool: ThreadPoolExecutor | None = None
        self.futures: dict[str, Future] = {}

    def start(self) -> None:
        if self.pool is None and installed():
            self.pool = ThreadPoolExecutor(SIDE_BY_SIDE, thread_name_prefix="molecule")
            self.futures = {s: self.pool.submit(run, s) for s in SCENARIOS}

    def results(self) -> dict[str, subprocess.CompletedProcess]:
        self.start()
        return {s: f.result() for s, f in self.futures.items()}

    def wait(self) -> None:
        """Until no scenario runs (a run that raised is judged by test_molecule.py, not here)."""
        for future in self.futures.values():
            future.exception()

    def stop(self) -> None:
        """At the session's end: scenarios not begun never begin; those running end as they do."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
