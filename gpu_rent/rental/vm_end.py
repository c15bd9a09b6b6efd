"""How the project's last VM ended, as `status` and `up` tell it once the VM is gone.

Nothing on the laptop sees an idle-killer fire with the lid closed, so the story is put together
from what outlives the VM:

- Nova's instance actions of the deleted server: the time of its `delete` (listed for deleted
  servers since compute microversion 2.21);
- the killer's last report that `status` read from the VM (kept in `.gpu-rent/idle-killer-seen.json`):
  when it said "deleting", or the deadline it named has passed by the delete, it was the killer;
- the killer's last words, written on the boot volume before its DELETE and read by the next `up`
  (roles/idle_killer/tasks/last_words.yml), which are the whole truth when they come.

`gpu-rent stop` records its own end, so an end status works out is always someone else's.
The judging is pure; the files and the one Nova call are at the bottom.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import time
from pathlib import Path

from gpu_rent.project.state import KILLER_SEEN_FILE as SEEN_FILE
from gpu_rent.project.state import LAST_END_FILE as END_FILE
from gpu_rent.util.atomic import write_atomically

# A kill may land this long before the deadline the killer named (a tick waits for the deadline to the
# second; clocks of the laptop and the VM may differ a little).
SLACK_SECONDS = 120
# ... and this long after it (a tick, retries, Nova's own time): a delete later than that came after
# work moved the deadline, or from someone else, and is not put on the killer on a stale report.
LATE_SECONDS = 600
# how a report's `acted` says its DELETE did not go through (idle_killer.delete_self): refused for good, or
# failed this tick (tried again at the next); the watchdog reads the same words (watch/decision.blind_killer)
DELETE_REFUSED, DELETE_FAILED = "CREDENTIAL REFUSED", "delete failed"
FAILED = (DELETE_FAILED, DELETE_REFUSED)

KILLER, ELSEWHERE = "idle-killer", "elsewhere"


def _clock(unix: float) -> str:
    return time.strftime("%H:%M", time.localtime(unix))


def judge(server_id: str, deleted_at: float | None, seen: dict | None) -> dict:
    """Who deleted server_id, when and why, from Nova's delete time and the killer's last report."""
    end = {"server_id": server_id, "at": deleted_at, "by": ELSEWHERE, "reason": None, "source": "nova"}
    if not seen or seen.get("server_id") != server_id:
        return end
    tick_at = number(seen.get("tick_at"))
    took = not str(seen.get("acted") or "").startswith(FAILED)
    if seen.get("action") == "delete" and (took or _near(deleted_at, tick_at)):
        at = deleted_at or number(seen.get("deleted_at")) or tick_at
        return {**end, "at": at, "by": KILLER, "reason": seen.get("reason"), "source": "report"}
    fires_at = number(seen.get("fires_at"))
    if fires_at and tick_at and _near(deleted_at, fires_at):
        said = f"its report at {_clock(tick_at)}: {seen.get('reason')}; fires at {_clock(fires_at)}"
        return {**end, "by": KILLER, "reason": said, "source": "deadline"}
    return end


def _near(deleted_at: float | None, moment: float | None) -> bool:
    """Whether a delete at deleted_at is the killer acting at moment (its deadline, or its failed try)."""
    return bool(deleted_at and moment and moment - SLACK_SECONDS <= deleted_at <= moment + LATE_SECONDS)


def from_last_words(words: dict) -> dict:
    """The end the killer itself wrote on the boot volume (read by the next up)."""
    at = number(words.get("deleted_at")) or number(words.get("at"))
    return {
        "server_id": str(words.get("server_id") or ""),
        "at": at,
        "by": KILLER,
        "reason": str(words.get("reason") or "no reason given"),
        "source": "last words",
    }


def stopped(server_id: str, now: float, command: str = "stop", reason: str | None = None) -> dict:
    """The end gpu-rent itself gave the server (stop, destroy, or an up that could not guard it)."""
    return {"server_id": server_id, "at": now, "by": f"gpu-rent {command}", "reason": reason, "source": "gpu-rent"}


def line(end: dict) -> str:
    """One line: "deleted by the idle-killer at 14:32 (queue empty, ... idle for 30 min)"."""
    at = number(end.get("at"))
    when = f" at {_clock(at)}" if at else " (time unknown)"
    reason = f" ({end['reason']})" if end.get("reason") else ""
    if end.get("by") == KILLER:
        return f"deleted by the idle-killer{when}{reason}"
    if str(end.get("by")).startswith("gpu-rent "):
        return f"deleted by {end['by']}{when}{reason}"
    return (
        f"deleted{when}, not by gpu-rent stop: by hand, by the cloud, or by the idle-killer with no report"
        " of it on this machine (the next `gpu-rent up` shows its last words if it fired)"
    )


def number(value: object) -> float | None:
    """A JSON number as a float; None for anything else (a bool, text, null): the reports are the VM's."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


# ---------------------------------------------------------------------------------------------- files


def read(runtime_dir: Path, name: str) -> dict | None:
    try:
        data = json.loads((runtime_dir / name).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write(runtime_dir: Path, name: str, data: dict) -> None:
    """Atomically, and never fatal: these files only make a later line better."""
    with contextlib.suppress(OSError):
        runtime_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(runtime_dir / name, json.dumps(data, indent=1, sort_keys=True) + "\n")


def settle(runtime_dir: Path, conn, server_id: str) -> dict:
    """The end of a server found gone, judged once: an end already kept for it stands (stop's own, or the
    watchdog's, which saw the report last); else Nova's delete time and the killer's last report."""
    kept = read(runtime_dir, END_FILE)
    if kept and kept.get("server_id") == server_id:
        return kept
    deleted_at = nova_deleted_at(conn, server_id) if conn is not None else None
    end = judge(server_id, deleted_at, read(runtime_dir, SEEN_FILE))
    write(runtime_dir, END_FILE, end)
    return end


# ---------------------------------------------------------------------------------------------- Nova

# Instance actions of deleted servers are listed from this microversion on.
DELETED_ACTIONS_MICROVERSION = "2.21"


def nova_deleted_at(conn, server_id: str) -> float | None:
    """When Nova took the DELETE of server_id, from its instance actions; None when it does not say."""
    try:
        response = conn.compute.get(
            f"/servers/{server_id}/os-instance-actions",
            microversion=DELETED_ACTIONS_MICROVERSION,
        )
        if response.status_code != 200:
            return None
        return delete_time(response.json())
    except Exception:  # an older cloud, a refusal, a network blip: the line says "time unknown"
        return None


def delete_time(body: dict) -> float | None:
    """The newest `delete` in a GET /servers/{id}/os-instance-actions answer (times are UTC)."""
    actions = body.get("instanceActions") if isinstance(body, dict) else None
    times = [_iso(a.get("start_time")) for a in actions or () if isinstance(a, dict) and a.get("action") == "delete"]
    times = [t for t in times if t is not None]
    return max(times) if times else None


def _iso(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(value.split(".")[0].rstrip("Z"), "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None
