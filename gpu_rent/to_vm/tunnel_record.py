"""The background tunnel's record and life lock: what `status`, `up` and `stop` read of a tunnel process.

Kept apart from the watchdog so that reading them imports no SSH and no Ansible (status starts fast).
"""

from __future__ import annotations

import json
from pathlib import Path

from gpu_rent.project.settings import Settings
from gpu_rent.project.state import TUNNEL_FILE as RECORD_FILE
from gpu_rent.util.atomic import write_atomically
from gpu_rent.util.file_lock import FileLock

# Held by the tunnel process for its whole life: the system drops it however the process ends (gpu_rent/file_lock),
# so a record whose pid was reused by another program is never taken for a live tunnel.
ALIVE_FILE = "tunnel.alive"


def record_path(settings: Settings) -> Path:
    return settings.runtime_dir / RECORD_FILE


def _hold_alive(settings: Settings) -> FileLock | None:
    """Take the tunnel's life lock (the caller keeps the returned lock); None when another process holds it."""
    path = settings.runtime_dir / ALIVE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, mode=0o600, thread_local=False)
    try:
        lock.acquire(timeout=0)
    except OSError:  # Timeout among them: held; any other error is read as held too, never as a dead tunnel
        return None
    return lock


def tunnel_alive(settings: Settings) -> bool:
    """Whether a tunnel process of this project holds its life lock now."""
    lock = _hold_alive(settings)
    if lock is None:
        return True
    lock.release()
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


def llm_url(settings: Settings) -> str | None:
    """The LLM runtime's address on this machine when the project runs one (LLM_RUNTIME), else None."""
    return f"http://127.0.0.1:{settings.llm_local_port}" if settings.llm_runtime != "none" else None
