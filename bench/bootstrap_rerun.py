"""How much cheaper a re-run of playbooks/bootstrap.yml is than the first run (goal: <= 0.2x).

Usage (the test ground running; from the repository root):
    .venv/bin/python bench/bootstrap_rerun.py            # rents a fresh ground host, deletes it after
    .venv/bin/python bench/bootstrap_rerun.py 10.231.7.x <data volume id>  # a host never bootstrapped

On the ground the first run installs no packages (the host image has them) and the SwarmUI
stand-in installs in a second, so the first run here is far shorter than on a real GPU VM, where
the ComfyUI install alone takes minutes; the ratio measured here is the pessimistic one.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import report
from tests.ground.test_bootstrap import recap, rent_host, run_bootstrap
from tests.groundkit import Cloud, connect, ground_missing


def timed_run(host: tuple[str, str], label: str) -> float:
    with tempfile.TemporaryDirectory() as workdir:  # no gpu-rent.vars: the extra vars stand in for it
        start = time.monotonic()
        result = run_bootstrap(host, Path(workdir))
        seconds = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(f"{label} failed (rc {result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}")
    print(f"{label:<10} {seconds:6.1f} s  changed={recap(result)['changed']}", flush=True)
    return seconds


def bench(host: tuple[str, str]) -> None:
    first = timed_run(host, "first run")
    rerun = timed_run(host, "re-run")
    ratio = rerun / first
    print(f"ratio      {ratio:6.2f}x (goal <= 0.20x){'' if ratio <= 0.2 else '  - over the goal'}")
    report("re-run-time", ratio, "<= 0.2", "first run of bootstrap.yml")


def main() -> None:
    if len(sys.argv) > 2:  # a host of yours: address and its data volume's id
        bench((sys.argv[1], sys.argv[2]))
        return
    reason = ground_missing()
    if reason:
        sys.exit(reason)
    cloud = Cloud(connect("ground"))
    try:
        net, _ = cloud.network()
        host = rent_host(cloud, net)
        print(f"host       {host[0]}", flush=True)
        bench(host)
    finally:
        cloud.close()


if __name__ == "__main__":
    main()
