"""A playbook never outlives its command: the run's watcher ends it when the command is killed
outright, and the next command of the project ends whatever is left."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from gpu_rent.orphans import PROJECT_MARK, RUN_MARK, marked, running
from gpu_rent.runner import end_orphans

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


def test_the_runs_watcher_ends_its_playbook_when_the_command_is_killed_outright(tmp_path):
    pidfile = tmp_path / "playbook.pid"
    command = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from gpu_rent.runner import _ended_with_us
        with _ended_with_us("run-1"):
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
    finally:
        cli.kill()
        cli.wait()
