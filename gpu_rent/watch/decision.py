"""What the laptop's watchdog does about the server Nova shows it: pure, so every case is a unit test.

Nova's `status` is what it shows; `vm_state`/`task_state` say what is underway. Preemption on
Selectel shelves the server (SHELVED_OFFLOADED, disks kept); the watchdog brings back that same
server and never rents a new one: an endless re-create is how a broken image bills all night.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpu_rent.rental.vm_end import DELETE_FAILED, DELETE_REFUSED, number

# How often the watchdog looks at the server (`--watch-seconds`).
WATCH_SECONDS = 30.0


class Act(StrEnum):
    OK = "ok"  # running: keep the tunnel
    WAIT = "wait"  # underway (booting, rebooting, unshelving): look again next tick
    RECOVER = "recover"  # shelved/stopped/expired: unshelve the same server, bootstrap lightly, reopen
    GONE = "gone"  # deleted (idle-killer, stop, the cloud): close the tunnel, nothing to bring back
    FATAL = "fatal"  # ERROR: delete it (the volumes stay), say why and exit, never re-create
    UNKNOWN = "unknown"  # a status this program does not know: log it, touch nothing


@dataclass(frozen=True)
class Verdict:
    act: Act
    why: str
    cause: str = ""  # what the cloud shows, without the move (FATAL: said again when the move cannot be made)


# What roles/server/tasks/existing.yml brings back (EXPIRED: Selectel's preemptible end, by its vm_state).
RECOVERABLE = {"SHELVED", "SHELVED_OFFLOADED", "SHUTOFF", "EXPIRED", "SUSPENDED", "PAUSED"}
UNDERWAY = {"BUILD", "REBOOT", "HARD_REBOOT", "MIGRATING", "RESIZE", "VERIFY_RESIZE", "REVERT_RESIZE", "PASSWORD"}
DELETING = {"DELETED", "SOFT_DELETED"}


def judge(status: str | None, vm_state: str | None = None, task_state: str | None = None, fault: str = "") -> Verdict:
    """The watchdog's move for a server showing (status, vm_state, task_state); None status: no server."""
    raw = f"status {status}, vm_state {vm_state or '-'}, task_state {task_state or '-'}"
    if status is None:
        return Verdict(Act.GONE, "the server is gone (deleted by the idle-killer, a stop, or the cloud)")
    status = status.upper()
    if (task_state or "").lower() == "deleting" or status in DELETING:
        return Verdict(Act.GONE, f"the server is being deleted ({raw})")
    if status == "ERROR":
        why = f"the server is in ERROR ({raw}{'; fault: ' + fault if fault else ''})"
        # nothing on a failed server can delete it, and a cloud may bill it: the laptop ends it, never re-creates
        return Verdict(
            Act.FATAL, f"{why}: deleting it (the volumes stay), not re-created; `gpu-rent up` rents anew", why
        )
    if task_state:  # unshelving, spawning, powering-on...: the cloud is already at it
        return Verdict(Act.WAIT, f"the cloud is at work ({raw})")
    if status == "ACTIVE":
        return Verdict(Act.OK, raw)
    if status in RECOVERABLE:
        return Verdict(Act.RECOVER, f"the server was taken off its host ({raw}): bringing it back")
    if status in UNDERWAY:
        return Verdict(Act.WAIT, f"the server is busy ({raw})")
    return Verdict(Act.UNKNOWN, f"unknown server state ({raw}): left alone, looking again")


# Renew the token this long before it expires: a renewal must never race the expiry itself.
TOKEN_MARGIN_SECONDS = 15 * 60


def token_due(expires_at: float | None, now: float, margin: float = TOKEN_MARGIN_SECONDS) -> bool:
    """Whether the cloud token should be renewed now (unknown expiry: yes)."""
    return expires_at is None or expires_at - now <= margin


# How many times in a row the same server may be brought back before the watchdog gives up:
# preempted three times within the window means the pool has no room, not bad luck.
MAX_RECOVERIES = 3
RECOVERY_WINDOW_SECONDS = 3600


def may_recover(recent: list[float], now: float) -> bool:
    """Whether another recovery is allowed given the times of the recent ones."""
    return len([t for t in recent if now - t < RECOVERY_WINDOW_SECONDS]) < MAX_RECOVERIES


# The killer's ticks the laptop waits through after a verdict the killer could not carry out, before it acts.
KILLER_PATIENCE_TICKS = 3
KILLER_TICK_SECONDS = 60.0  # the killer's timer (idle_killer_tick_seconds), when its report does not say
KILLER_SLOW_TICK_SECONDS = 300.0  # more than a slow tick may take beyond its interval (its unit's timeout)


class Blind(StrEnum):
    NOTIFY = "notify"  # the killer cannot delete this VM, but it has not decided to: tell the user once
    DELETE = "delete"  # the killer decided the VM goes and it has not gone: the laptop deletes it itself


def blind_killer(report: dict, seen_at: float, now: float, failed_ticks: int) -> tuple[Blind, str] | None:
    """What the laptop does about the killer's last report while Nova shows the server ACTIVE; None: nothing.

    The killer's own verdict is the trigger, never the laptop's guess at idleness: the laptop deletes only a
    VM its killer has decided to delete and that is still there (refused at once; a delete that failed for
    KILLER_PATIENCE_TICKS ticks; or a killer silent that long past its delete verdict or its deadline: a
    guest that stopped ticking). seen_at: the laptop's time when it first read this report's tick, so the
    VM's clock is only ever compared with itself, and the caller keeps it only while every read since
    succeeded (a read that fails says nothing of the killer); failed_ticks: the reports in a row whose
    delete failed."""
    tick = number(report.get("tick_seconds")) or KILLER_TICK_SECONDS
    # a tick may run up to its unit's TimeoutStartSec (3 ticks + 240 s, roles/idle_killer) before the next
    patience = KILLER_PATIENCE_TICKS * tick + KILLER_SLOW_TICK_SECONDS
    acted = str(report.get("acted") or "")
    reason = str(report.get("reason") or "no reason given")
    silent = now - seen_at > patience
    if report.get("action") == "delete":
        if acted.startswith(DELETE_REFUSED):
            return Blind.DELETE, f"the idle-killer decided the VM goes ({reason}) but cannot delete it: {acted}"
        if acted.startswith(DELETE_FAILED) and failed_ticks >= KILLER_PATIENCE_TICKS:
            return Blind.DELETE, f"the idle-killer's delete failed {failed_ticks} ticks in a row ({acted})"
        if silent:
            return Blind.DELETE, f"the idle-killer decided the VM goes ({reason}) and has said nothing since"
        return None
    fires_at, tick_at = number(report.get("fires_at")), number(report.get("tick_at"))
    if fires_at and tick_at and silent and now - (seen_at + fires_at - tick_at) > patience:
        return Blind.DELETE, "the idle-killer is silent past its deadline (a guest that stopped ticking)"
    credential = report.get("credential") if isinstance(report.get("credential"), dict) else {}
    if credential.get("state") == "refused":
        return Blind.NOTIFY, f"the idle-killer cannot delete this VM: {credential.get('message')}"
    return None
