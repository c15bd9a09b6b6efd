"""The idle-killer's decision: keep the VM or delete it, and why, from one look at it.

A pure function of what one tick saw and what earlier ticks remembered, so
that every rule is tested here, exhaustively, and the very same file runs on
the VM (the idle_killer role installs it beside the program that gathers the
observation and acts). Standard library only: the VM has no gpu-rent.

The order of the rules is the order of SPEC §7: a hold and the grace after a
boot keep the VM whatever else is true; then any sign of work keeps it and
restarts the empty-queue clock; an unreachable SwarmUI or a backend that is
not running counts as busy only up to a cap, so that nothing keeps a VM alive
forever; then the clock runs, and the VM goes when it has run IDLE_MINUTES.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

KEEP = "keep"
DELETE = "delete"
# GetGlobalStatus counters (swarmui-api research): work waiting or running in SwarmUI.
BUSY_COUNTERS = ("waiting_gens", "live_gens", "waiting_backends", "loading_models")


@dataclass(frozen=True)
class Limits:
    idle_seconds: float  # IDLE_MINUTES: how long the queue must stay empty
    grace_seconds: float  # IDLE_GRACE_MINUTES: after a boot or an unshelve, never idle
    cap_seconds: float  # how long an unreachable or not-ready SwarmUI may count as busy


@dataclass(frozen=True)
class Observation:
    now: float  # unix time of this tick
    booted_at: float  # unix time of the boot (or unshelve) this VM life started with
    status: dict | None = None  # GetGlobalStatus's answer; None when SwarmUI did not answer
    error: str | None = None  # why SwarmUI did not answer (or answered with an error)
    comfy_queue: int = 0  # prompts in the ComfyUI backend's own queue
    downloads: tuple[str, ...] = ()  # *.download.tmp / *.tmp files under Models changed lately
    seeding_until: float | None = None  # the seeding lock's "valid until", when the lock exists
    hold_until: float | None = None  # /mnt/swarm_data/.gpu-rent-hold-until, when it exists


@dataclass(frozen=True)
class Memory:
    """What a tick hands to the next (the program keeps it in its status file)."""

    idle_since: float | None = None  # when the queue was last seen going empty
    troubled_since: float | None = None  # when SwarmUI stopped answering, or its backend stopped running


@dataclass(frozen=True)
class Decision:
    action: str  # KEEP or DELETE
    reason: str  # one line, for the journal, the status file and `gpu-rent status`
    memory: Memory
    fires_at: float | None = None  # when the VM goes if nothing changes; None while something keeps it


def _minutes(seconds: float) -> str:
    return f"{max(seconds, 0) / 60:.0f} min"


def decide(seen: Observation, limits: Limits, memory: Memory) -> Decision:
    now = seen.now

    def keep(reason: str, **changes) -> Decision:
        # anything that keeps the VM for a reason of its own restarts the empty-queue clock
        return Decision(KEEP, reason, replace(memory, idle_since=None, **changes))

    if seen.hold_until is not None and seen.hold_until > now:
        return keep(f"hold for {_minutes(seen.hold_until - now)} more", troubled_since=None)
    if now - seen.booted_at < limits.grace_seconds:
        left = limits.grace_seconds - (now - seen.booted_at)
        return keep(f"grace after boot, {_minutes(left)} left", troubled_since=None)
    if seen.seeding_until is not None and seen.seeding_until > now:
        return keep("seeding runs (extensions, models or a push)")
    if seen.downloads:
        more = f" and {len(seen.downloads) - 1} more" if len(seen.downloads) > 1 else ""
        return keep(f"download of {seen.downloads[0]}{more}")

    trouble = _trouble(seen)
    idle_since = memory.idle_since
    if trouble is not None:
        since = memory.troubled_since if memory.troubled_since is not None else now
        if now - since < limits.cap_seconds:
            left = limits.cap_seconds - (now - since)
            return keep(f"{trouble}: counted as busy for {_minutes(left)} more", troubled_since=since)
        # past the cap the trouble is no reason to live: the idle clock runs from the cap on, and
        # never from before the last thing that kept the VM (a download that ended a minute ago)
        memory = replace(memory, troubled_since=since)
        idle_since = idle_since if idle_since is not None else max(since + limits.cap_seconds, now)
        reason = f"{trouble} for {_minutes(now - since)}"
    else:
        memory = replace(memory, troubled_since=None)
        work = _work(seen)
        if work:
            return keep(work)
        reason = "queue empty"

    idle_since = idle_since if idle_since is not None else now
    memory = replace(memory, idle_since=idle_since)
    fires_at = idle_since + limits.idle_seconds
    if now >= fires_at:
        return Decision(DELETE, f"{reason}, idle for {_minutes(now - idle_since)}: deleting this server", memory)
    return Decision(KEEP, f"{reason}, idle for {_minutes(now - idle_since)}", memory, fires_at)


def _trouble(seen: Observation) -> str | None:
    """Why SwarmUI cannot say whether it works: no answer, an error, or no running backend."""
    if seen.status is None:
        return f"SwarmUI not answering ({' '.join((seen.error or 'no reply').split())[:120]})"
    if "error" in seen.status or "error_id" in seen.status:
        return f"SwarmUI answers with an error ({seen.status.get('error_id') or seen.status.get('error')})"
    backend = (seen.status.get("backend_status") or {}).get("status")
    if backend not in ("running", "some_loading"):  # some_loading: running, with a model loading
        # SwarmUI's "idle" means no backend started; "loading" is a start under way
        return f"backend {backend or 'unknown'}, not running"
    return None


def _work(seen: Observation) -> str | None:
    """Work in SwarmUI or its ComfyUI backend, in words; None when there is none."""
    counters = seen.status.get("status") or {}
    busy = [f"{int(counters[k])} {k.replace('_', ' ')}" for k in BUSY_COUNTERS if _count(counters.get(k)) > 0]
    if seen.comfy_queue > 0:
        busy.append(f"{seen.comfy_queue} in the ComfyUI queue")
    return ", ".join(busy) or None


def _count(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0
