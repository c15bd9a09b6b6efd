"""A playbook never outlives its command: the run's watcher ends it when the command is killed
outright, and the next command of the project ends whatever is left."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from gpu_rent.rental.orphans import PROJECT_MARK, RUN_MARK, marked, running
from gpu_rent.rental.runner import _run_temp, end_orphans

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def wait_for(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_marked_process_of_this_project_is_ended_and_others_are_left(tmp_path):
    mine, other = tmp_path / "mine", tmp_path / "other"
    env = dict(os.environ)
    left = subprocess.Popen(SLEEP, env={**env, PROJECT_MARK: str(mine)}, start_new_session=True)
    kept = subprocess.Popen(SLEEP, env={**env, PROJECT_MARK: str(other)}, start_new_session=True)
    try:
        wait_for(lambda: marked(PROJECT_MARK, str(mine)) == [left.pid])
        assert end_orphans(mine) == 1
        assert left.wait(timeout=10) == -signal.SIGTERM  # to its group; no need for SIGKILL
        assert kept.poll() is None and marked(PROJECT_MARK, str(mine)) == []
        assert end_orphans(mine) == 0
    finally:
        for p in (left, kept):
            p.kill()
            p.wait()


def test_the_runs_watcher_ends_its_playbook_and_clears_its_temp_when_the_command_is_killed_outright(tmp_path):
    pidfile = tmp_path / "playbook.pid"
    temp = tmp_path / "run temp"
    (temp / "ansible-local-1").mkdir(parents=True)
    (temp / "ansible-local-1" / "staged").write_text("the killer's credential, staged for copy")
    command = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from pathlib import Path
        from gpu_rent.rental.runner import _ended_with_us
        with _ended_with_us("run-1", Path({str(temp)!r})):
            p = subprocess.Popen({SLEEP!r}, env={{**os.environ, {RUN_MARK!r}: "run-1"}}, start_new_session=True)
            open({str(pidfile)!r}, "w").write(str(p.pid))
            time.sleep(60)
    """)
    cli = subprocess.Popen([sys.executable, "-c", command])
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text() and marked(RUN_MARK, "run-1"))
        playbook = int(pidfile.read_text())
        cli.send_signal(signal.SIGKILL)
        cli.wait()
        wait_for(lambda: not running(playbook))
        wait_for(lambda: not temp.exists())
    finally:
        cli.kill()
        cli.wait()


def test_a_run_temp_of_a_dead_command_goes_at_the_next_run_and_a_live_ones_stays(tmp_path):
    root = tmp_path / "runner" / "tmp"
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = root / f"{dead.pid}-oldrun"
    (left / "ansible-local-9").mkdir(parents=True)
    (left / "ansible-local-9" / "staged").write_text("secret")
    live = root / f"{os.getppid()}-otherrun"  # the pytest runner's parent: alive
    live.mkdir()
    stray = root / "not-a-run"
    stray.mkdir()

    with _run_temp(root / f"{os.getpid()}-thisrun") as temp:
        assert temp.is_dir() and oct(temp.stat().st_mode & 0o777) == "0o700"
        assert sorted(p.name for p in root.iterdir()) == sorted([live.name, temp.name])
    assert not temp.exists() and live.is_dir()
