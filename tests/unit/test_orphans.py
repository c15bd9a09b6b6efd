"""A killed command's playbook is found by its mark and ended before the next one starts."""

import os
import subprocess
import sys
import time

from gpu_rent.runner import PLAYBOOK_MARK, end_orphans, orphans


def test_a_marked_process_of_this_project_is_ended_and_others_are_left(tmp_path):
    mine, other = tmp_path / "mine", tmp_path / "other"
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    env = dict(os.environ)
    left = subprocess.Popen(sleep, env={**env, PLAYBOOK_MARK: str(mine)}, start_new_session=True)
    kept = subprocess.Popen(sleep, env={**env, PLAYBOOK_MARK: str(other)}, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while left.pid not in orphans(mine) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert orphans(mine) == [left.pid]
        assert end_orphans(mine) == 1
        assert left.wait(timeout=10) == -15  # SIGTERM to its group, no need for SIGKILL
        assert kept.poll() is None and orphans(mine) == []
        assert end_orphans(mine) == 0
    finally:
        for p in (left, kept):
            p.kill()
            p.wait()
