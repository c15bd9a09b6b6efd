"""The background tunnel's record and life lock: what `status`, `up` and `stop` read of a tunnel process.

Kept apart from the watchdog so that reading them imports no SSH and no Ansible (status starts fast).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpu_rent.atomic import write_atomically
from gpu_rent.config import Settings

RECORD_FILE = "tunnel.json"
# Held (flock) by the tunnel process for its whole life: the kernel drops it however the process ends,
# so a record whose pid was reused by another program is never taken for a live tunnel.
ALIVE_FILE = "tunnel.alive"


def record_path(settings: Settings) -> Path:
    return settings.runtime_dir / RECORD_FILE


def _hold_alive(settings: Settings):
    """Take the tunnel's life lock (an open file the caller keeps); None when another process holds it."""
    path = settings.runtime_dir / ALIVE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - kept open for the life of the process
    try:
        _lock(handle)
    except OSError:
        handle.close()
        return None
    return handle


def _lock(handle) -> None:
    if os.name == "nt":
        import msvcrt

        msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
    else:
        import fcntl

        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)


def tunnel_alive(settings: Settings) -> bool:
    """Whether a tunnel process of this project holds its life lock now."""
    handle = _hold_alive(settings)
    if handle is None:
        return True
    handle.close()  # closing releases it
    return False


def read_record(settings: Settings) -> dict | None:
    """The running tunnel's record, or None when no tunnel process of this project is alive."""
    try:
        record = json.loads(record_path(settings).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("state") == "closed" or not tunnel_alive(settings):
        return None
    return record


def _write_record(settings: Settings, record: dict) -> None:
    path = record_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(record, indent=1))


def url(settings: Settings) -> str:
    return f"http://127.0.0.1:{settings.local_port}"
