"""`gpu-rent status` against `openstack server list`, both as a user runs them, on the ground (goal: <= 0.5x).

Usage (the test ground running; from the repository root):
    .venv/bin/python bench/status.py

Rents in a copy of the ground's project (its own NAME) with `gpu-rent up --yes --no-tunnel`, then times the
CLI processes, start-up included: `gpu-rent status` (text), `gpu-rent status --json` and python-openstackclient's
`openstack server list` (this venv's) against the same cloud. One warm-up round, then the median of 5 rounds;
each round runs the three once in turn, so load from whatever else runs on the machine falls on all of them.
Destroys the rental at the end, whatever happened.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._rental import destroyed
from bench._report import report
from tests.ground.test_rental import gpu_rent, make_project
from tests.groundkit import CLOUDS_YAML, ground_missing, unique

ROUNDS = 5
BIN = Path(sys.executable).parent
USER_ENV = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))}


def commands(project: Path) -> dict[str, tuple[list[str], Path, dict]]:
    """label -> (argv, cwd, env): gpu-rent reads the cloud from the project's .env, openstack from OS_*."""
    cloud_env = USER_ENV | {"OS_CLIENT_CONFIG_FILE": str(CLOUDS_YAML), "OS_CLOUD": "ground"}
    return {
        "gpu-rent status": ([str(BIN / "gpu-rent"), "status"], project, USER_ENV),
        "gpu-rent status --json": ([str(BIN / "gpu-rent"), "status", "--json"], project, USER_ENV),
        "openstack server list": ([str(BIN / "openstack"), "server", "list"], project, cloud_env),
    }


def timed(argv: list[str], cwd: Path, env: dict) -> float:
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-3:])} failed (rc {result.returncode}):\n{result.stdout}{result.stderr}")
    return seconds


def bench(project: Path) -> None:
    runs = commands(project)
    times: dict[str, list[float]] = {label: [] for label in runs}
    for round_ in range(ROUNDS + 1):
        for label, (argv, cwd, env) in runs.items():
            seconds = timed(argv, cwd, env)
            if round_:  # round 0 warms the page cache and the clouds' token caches
                times[label].append(seconds)
    median = {label: statistics.median(values) for label, values in times.items()}
    reference = median["openstack server list"]
    print(f"wall time of the CLI process, median of {ROUNDS} after one warm-up, the ground on 127.0.0.1")
    for label, values in times.items():
        print(f"{label:<24} {median[label]:6.2f} s   ({', '.join(f'{v:.2f}' for v in values)})")
    for label, name in (("gpu-rent status", "status"), ("gpu-rent status --json", "status-json")):
        ratio = median[label] / reference
        print(f"RATIO {label} vs openstack server list: {ratio:.2f}x (goal <= 0.5x)"
              f"{'' if ratio <= 0.5 else '  - over the goal'}")  # fmt: skip
        report(name, ratio, "<= 0.5", "openstack server list")


def main() -> int:
    reason = ground_missing()
    if reason:
        print(f"bench/status.py: {reason}")
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="gpu-rent-bench-status-"))
    project = make_project(tmp, unique("bench-status"))
    try:
        started = time.monotonic()
        result = gpu_rent(project, "up", "--yes", "--no-tunnel")
        if result.returncode != 0:
            print(f"gpu-rent up failed (rc {result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
            return 1
        print(f"rented     {project.name} in {time.monotonic() - started:.0f} s (gpu-rent up --no-tunnel)", flush=True)
        bench(project)
    finally:
        clean = destroyed(project, tmp)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
