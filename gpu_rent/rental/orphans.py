"""Playbook processes that outlive the gpu-rent command that started them, and their end.

ansible-runner starts ansible-playbook with SIGHUP ignored, so a command killed outright (kill -9,
a crash, the OOM killer) would leave its playbook renting on. Every process of a run carries two
marks in its environment (ansible's forks and ssh inherit them): the project, and the run. A small
watcher started with each run ends the run's processes the moment its command dies without ending
them; a later command holding the project's lock ends whatever of the project is still there.
Linux (/proc); elsewhere nothing is found. Imports nothing heavy: the watcher starts in milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from pathlib import Path

PROJECT_MARK = "GPU_RENT_PLAYBOOK_OF"  # the project folder
RUN_MARK = "GPU_RENT_PLAYBOOK_RUN"  # one run of one playbook
GRACE_SECONDS = 5.0


def marked(name: str, value: str) -> list[int]:
    """Pids of processes (other than this one) whose environment has NAME=VALUE."""
    mark = f"{name}={value}".encode()
    me = os.getpid()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark in environ.read_bytes().split(b"\0") and int(environ.parent.name) != me:
                found.append(int(environ.parent.name))
        except (OSError, ValueError):
            continue
    return found


def end(pids: list[int], grace: float = GRACE_SECONDS) -> int:
    """SIGTERM to each one's process group, SIGKILL to what is left after the grace; how many there were."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), signal.SIGTERM)
    left, deadline = list(pids), time.monotonic() + grace
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if running(pid)]
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def watch(fd: int, token: str, temp: str) -> None:
    """Wait until the command's end of the pipe closes (it ended, however it ended), then end its run
    and remove the run's temporary folder (the credential may be staged there)."""
    with contextlib.suppress(OSError):
        while os.read(fd, 1):
            pass
    end(marked(RUN_MARK, token))
    shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2], sys.argv[3])
