"""The idle-killer's decision: keep the VM or delete it, and why, from one look at it.

A pure function of what one tick saw and what earlier ticks remembered, so
that every rule is tested here, exhaustively, and the very same file runs on
the VM (the idle_killer role installs the on_vm package, this and the program that
gathers the observation and acts). Standard library only: the VM has no gpu-rent.

The rules, in order (SPEC §7, with the order of work and trouble fixed by issue 13):

1. a hold in the future keeps the VM;
2. so does the grace after a boot (or an unshelve, or an arming);
3. so does a valid seeding lock, and a partial download being written;
4. any sign of work keeps it and restarts the empty-queue clock, whatever else is
   wrong: a GetGlobalStatus counter above 0, a prompt in any ComfyUI's own
   queue, a GPU busier than IDLE_GPU_PERCENT, the LLM runtime's own activity (a
   model Ollama keeps loaded, or one kept for ever whose end moved: a request
   ended; a llama.cpp slot or request at work), the user's
   KEEP_ALIVE_COMMAND exiting 0 - even when SwarmUI's aggregate backend_status
   says errored (it does as soon as ANY backend errored,
   BackendHandler.CurrentBackendStatus), or SwarmUI answers with an error;
5. trouble - the data volume not mounted or without its marker, SwarmUI not
   answering or answering with an error, none of gpu-rent's own ComfyUI backends
   running (read from ListBackends, not the aggregate: a user's extra errored
   backend is no trouble while one of ours runs), a ComfyUI that runs but does
   not tell its queue - counts as busy only up to a cap, so that no trouble keeps
   a VM alive for ever; so does a KEEP_ALIVE_COMMAND that cannot say (not found,
   timed out), and an LLM runtime that runs but does not tell (a timeout, an
   HTTP 5xx, an answer of another shape, a model of a long keep-alive whose end
   did not move): never
   silently idle. An LLM runtime that is not there to ask (nothing listens on
   its port, the route is switched off) is only named: it can run nothing. At a
   server's first boot from the image, before the arm installs anything, its
   config asks no SwarmUI, no data volume and no LLM runtime: none of them is
   trouble, as none is there yet;
6. then the clock runs, and the VM goes when it has run IDLE_MINUTES. It never
   runs from before the last key typed in a terminal (a person in an SSH shell):
   a shell keeps the VM IDLE_MINUTES after its last input, and a terminal left
   open and untouched does not keep it at all. With BILLING_HOUR on, a deadline
   that falls inside an hour already billed moves to a margin before that hour
   ends: the hour is paid whether the VM lives or not; work in it resets the clock.

A VM back with the memory of its life before (restored after a preemption, or
rebooted; the killer keeps that memory on the boot volume) gets no new boot
grace: its idle clock goes on from where it stood (the time it was down not
counted), and for a short restore grace it is not deleted and trouble (SwarmUI
coming back) does not count; work restarts the clock as always.

The GPU is read once a tick (nvidia-smi's utilization.gpu is itself the share of
its last sample period, 1/6 s to 1 s, that a kernel ran): the VM goes only after
a whole IDLE_MINUTES of ticks all found every GPU at or below the threshold, so
one quiet sample between two batches never fires it. Memory in use is no work:
ComfyUI keeps its models loaded.

Work the GPU shows has no cap, on purpose: the product never deletes a VM while
work runs. Work that only SwarmUI's or ComfyUI's counters tell, with every GPU
read and at or below IDLE_GPU_PERCENT for IDLE_HUNG_MINUTES, is hung (SwarmUI
#1219: a queue frozen in ComfyUI, every GPU at 0 %): the reason line warns of it
ten minutes before, then it is trouble counted from when the GPU went quiet,
capped like any other. A GPU that cannot be read never makes work hung.
SwarmUI itself ends a generation waiting for a backend after
Backends.MaxTimeoutMinutes (120).

One file past 500 lines on purpose: decide() and every rule it weighs, in the
order it weighs them, read as one; the signals' words (the LLM runtime's, the
GPUs', SwarmUI's) are the reason lines the journal and `gpu-rent status` show,
and the tests hold them against this one function.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

# gpu-rent's own backends, as the swarmui role's readiness check knows them too (comfy_backend.py)
from .comfy_backend import OUR_START_SCRIPT, is_ours

KEEP = "keep"
DELETE = "delete"
HOUR = 3600.0
FUTURE_SLACK = 5.0  # seconds a key's time may lie ahead of this clock (the tty keeps whole seconds)
# GetGlobalStatus counters (swarmui-api research): work waiting or running in SwarmUI.
BUSY_COUNTERS = ("waiting_gens", "live_gens", "waiting_backends", "loading_models")
LLM_NAMES = {"ollama": "Ollama", "llamacpp": "llama.cpp"}
HUNG_WARNING_SECONDS = 600.0  # how long before work counts as hung the reason line says it will (or half the wait)
# Ollama keeps a model "for ever" (a keep_alive below 0) as a keep-alive of math.MaxInt64 ns, ~292 years
# (envconfig/config.go KeepAlive, api/types.go Duration.UnmarshalJSON), and moves its end like any other's
# when a request ends (server/sched.go processCompleted: expiresAt = now + sessionDuration): its expires_at,
# less that keep-alive, is when its last request ended. An end further off than LLM_FOREVER_SECONDS is one.
GO_FOREVER_SECONDS = ((1 << 63) - 1) / 1e9
LLM_FOREVER_SECONDS = 100 * 365 * 86400.0


@dataclass(frozen=True)
class Limits:
    idle_seconds: float  # IDLE_MINUTES: how long the queue must stay empty
    grace_seconds: float  # IDLE_GRACE_MINUTES: after a boot or an unshelve, never idle
    cap_seconds: float  # how long an unreachable or not-ready SwarmUI may count as busy
    gpu_percent: float | None = None  # IDLE_GPU_PERCENT: a GPU busier than this is work; None: GPUs not looked at
    billing_hour: str = "off"  # BILLING_HOUR: off, clock or rental - how the cloud bills the hour begun
    billing_margin_seconds: float = 180  # a paid hour is used up to this long before it ends
    rental_started_at: float | None = None  # the server's creation, where hours count from it (rental)
    # after a restore (a preemption's, a reboot): the VM is not deleted and trouble does not count, but the
    # idle clock goes on from where it stood before the VM went down
    restore_grace_seconds: float = 600
    # IDLE_HUNG_MINUTES: work that only SwarmUI's or ComfyUI's counters tell, with every GPU read and at or below
    # gpu_percent this long, is hung (SwarmUI #1219: a frozen queue), trouble from when the GPU went quiet;
    # None: never (and never without a GPU reading)
    hung_seconds: float | None = None


@dataclass(frozen=True)
class LlmLook:
    """What the LLM runtime on the VM said of its own activity (idle_look.llm_look)."""

    runtime: str  # "ollama" or "llamacpp"
    # Ollama's GET /api/ps: each loaded model's name and when its keep-alive ends (unix time; None: not told)
    models: tuple[tuple[str, float | None], ...] = ()
    # llama.cpp's GET /props: its model loaded (not is_sleeping), from a request until --sleep-idle-seconds after
    # the last one; None: not told (a llama-server without sleep support), then its slots are read
    awake: bool | None = None
    slots: tuple[bool, ...] | None = None  # llama.cpp's GET /slots: each slot's is_processing; None: not read
    # llama.cpp's GET /metrics, read when /slots is off: requests processing plus deferred; None: not read
    requests: int | None = None
    error: str | None = None  # why nothing was read
    # Ollama's /api/ps waits for a model load, llama.cpp's /props for a reload (silent too: a stalled load is capped)
    loading: bool = False
    # it answered, or did not within the timeout, without telling (an HTTP 5xx such as llama.cpp's 503 while
    # it loads, an answer of another shape): it may be working; False with an error: nothing there to ask
    silent: bool = False


@dataclass(frozen=True)
class Observation:
    now: float  # unix time of this tick
    booted_at: float  # unix time of the boot (or unshelve) this VM life started with
    # when this VM came back with the memory of its life before (a preemption's restore, a reboot): the
    # boot's grace is over then, and restore_grace_seconds applies instead; None: a first boot or an arming
    restored_at: float | None = None
    # GetGlobalStatus's answer, or the error SwarmUI answered with ({"error_id", "error", "route"});
    # None when SwarmUI did not answer
    status: dict | None = None
    error: str | None = None  # why SwarmUI did not answer
    # False: no SwarmUI to ask yet (the config cloud-init writes at a server's first boot from the image, before the
    # arm installs SwarmUI): neither it nor a ComfyUI is work or trouble, where an absent one would be trouble
    swarmui: bool = True
    # the status of each of gpu-rent's own backends in ListBackends (our_backends); None when
    # ListBackends was not read: then SwarmUI's aggregate backend_status is all there is
    backends: tuple[str, ...] | None = None
    backends_error: str | None = None  # why ListBackends was not read
    comfy_queue: int = 0  # prompts running or waiting in the ComfyUI processes' own queues
    # ports of ComfyUI processes that run but did not tell their queue: it may hold prompts
    comfy_silent: tuple[int, ...] = ()
    # installs and conversions SwarmUI's service runs outside every counter and queue, in words
    # ("installing: pip install -r requirements.txt"; idle_look.installs_of)
    installs: tuple[str, ...] = ()
    downloads: tuple[str, ...] = ()  # *.download.tmp / *.tmp files under Models changed lately
    seeding_until: float | None = None  # the seeding lock's "valid until", when the lock exists
    hold_until: float | None = None  # /mnt/swarm_data/.gpu-rent-hold-until, when it exists
    data_volume: str | None = None  # what is wrong with the data volume ("not mounted at ..."); None: fine
    # since when the data volume's filesystem is grown at boot (roles/data_volume's resize2fs before the mount, which
    # a delete could cut and damage it): work, up to Limits.hung_seconds; None: no grow runs
    data_growing_since: float | None = None
    # each GPU's (index, utilisation %, memory used MiB) as nvidia-smi tells them (None: [N/A]); None: not read
    gpus: tuple[tuple[int, float | None, float | None], ...] | None = None
    gpu_error: str | None = None  # why the GPUs were not read ("no nvidia-smi on PATH", the driver's words)
    gpu_absent: bool = False  # no nvidia-smi at all: nothing to read, not a GPU that cannot be read
    # the newest key typed in a terminal on the VM: (unix time, "pts/0 (root)"); None: no terminal open
    shell_input: tuple[float, str] | None = None
    keep_alive: bool | None = None  # KEEP_ALIVE_COMMAND: True exited 0, False another code, None not set
    keep_alive_error: str | None = None  # why KEEP_ALIVE_COMMAND could not say (not found, timed out)
    llm: LlmLook | None = None  # the LLM runtime's look; None: not looked at (LLM_RUNTIME=none or IDLE_LLM off)


@dataclass(frozen=True)
class Memory:
    """What a tick hands to the next (the program keeps it in its status file)."""

    idle_since: float | None = None  # when the queue was last seen going empty
    troubled_since: float | None = None  # when SwarmUI stopped answering, or its backend stopped running
    # each loaded Ollama model's keep-alive end at the last tick: one that moved means a request came since
    llm_seen: dict = field(default_factory=dict, hash=False)
    hung_since: float | None = None  # since when the counters hold work with every GPU quiet (Limits.hung_seconds)


@dataclass(frozen=True)
class Decision:
    action: str  # KEEP or DELETE
    reason: str  # one line, for the journal, the status file and `gpu-rent status`
    memory: Memory
    fires_at: float | None = None  # when the VM goes if nothing changes; None while something keeps it
    paid_until: float | None = None  # BILLING_HOUR: the end of the hour already paid that fires_at uses up


def _minutes(seconds: float) -> str:
    return f"{max(seconds, 0) / 60:.0f} min"


def decide(seen: Observation, limits: Limits, memory: Memory) -> Decision:
    now = seen.now
    before = memory.llm_seen
    # a look that failed tells nothing of the ends: the next good one compares with the last one seen
    memory = replace(memory, llm_seen=before if seen.llm is not None and seen.llm.error else _llm_ends(seen))

    def keep(reason: str, **changes) -> Decision:
        # anything that keeps the VM for a reason of its own restarts the empty-queue clock
        return Decision(KEEP, reason, replace(memory, idle_since=None, **changes))

    # a generation waiting on what these keep for (a download, a seeding, a hold) is not hung meanwhile
    if seen.hold_until is not None and seen.hold_until > now:
        return keep(f"hold for {_minutes(seen.hold_until - now)} more", troubled_since=None, hung_since=None)
    if now - seen.booted_at < limits.grace_seconds:
        left = limits.grace_seconds - (now - seen.booted_at)
        return keep(f"grace after boot, {_minutes(left)} left", troubled_since=None, hung_since=None)
    if seen.seeding_until is not None and seen.seeding_until > now:
        return keep("seeding runs (extensions, models or a push)", hung_since=None)
    if seen.downloads:
        more = f" and {len(seen.downloads) - 1} more" if len(seen.downloads) > 1 else ""
        return keep(f"download of {seen.downloads[0]}{more}", hung_since=None)

    trouble = _trouble(seen, limits, before)
    queued, other = queued_work(seen), _other_work(seen, limits, before)
    hung_since, quiet = _hung_since(seen, limits, memory, queued, other)
    memory = replace(memory, hung_since=hung_since)
    work = ", ".join(w for w in (queued, other) if w) or None
    if quiet and now - hung_since >= limits.hung_seconds:
        # no work then: trouble from the moment the GPU went quiet, so the cap is mostly spent already
        hung = f"{queued}, but every GPU at or below {limits.gpu_percent:g} %: hung"
        trouble = f"{hung}; {trouble}" if trouble else hung
        memory = replace(memory, troubled_since=min(memory.troubled_since or hung_since, hung_since))
        work = None
    elif quiet and (left := limits.hung_seconds - (now - hung_since)) <= min(
        HUNG_WARNING_SECONDS, limits.hung_seconds / 2
    ):
        work = f"{work}, every GPU quiet for {_minutes(now - hung_since)}: hung in {_minutes(left)} more"
    if work:  # work seen is work done: whatever is wrong besides, the cap counts from when it ends
        return keep(f"{work}; {trouble}" if trouble else work, troubled_since=None)

    idle_since = memory.idle_since
    typed = _typed(seen)
    restoring = seen.restored_at is not None and now - seen.restored_at < limits.restore_grace_seconds
    if trouble is not None and restoring:  # SwarmUI coming back after the restore: the idle clock keeps running
        left = limits.restore_grace_seconds - (now - seen.restored_at)
        return Decision(KEEP, f"grace after a restore, {_minutes(left)} left ({trouble})",
                        replace(memory, troubled_since=None))  # fmt: skip
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
        running = backends_line(seen.backends)
        reason = f"queue empty, {running}" if running else "queue empty"
        reason = reason if seen.swarmui else "SwarmUI not installed yet"
    for note in (_quiet_gpu(seen, limits), _quiet_llm(seen)):
        reason = f"{reason}, {note}" if note else reason

    idle_since = idle_since if idle_since is not None else now
    if typed is not None and typed[0] > idle_since:  # a person typed since: the clock runs from the key
        idle_since = typed[0]
        reason = f"{reason}, typed in {typed[1]} {_minutes(now - typed[0])} ago"
    memory = replace(memory, idle_since=idle_since)
    reason = f"{reason}, idle for {_minutes(now - idle_since)}"
    deadline = idle_since + limits.idle_seconds
    # a tick late past the deadline (a slow tick, a suspended VM) may find the next hour begun: paid too
    fires_at, paid_until = deadline, paid_hour_end(max(deadline, now), limits)
    if paid_until is not None:  # the hour the deadline falls in is paid anyway: use it, up to the margin
        fires_at = max(deadline, paid_until - limits.billing_margin_seconds)
        reason = f"{reason}; the hour is paid for {_minutes(paid_until - now)} more"
    if restoring:  # back a moment ago, perhaps for someone: never deleted within the restore's grace
        grace_ends = seen.restored_at + limits.restore_grace_seconds
        fires_at = max(fires_at, grace_ends)
        reason = f"{reason}; grace after a restore, {_minutes(grace_ends - now)} left"
    if now >= fires_at:
        return Decision(DELETE, f"{reason}: deleting this server", memory)
    return Decision(KEEP, reason, memory, fires_at, paid_until)


def paid_hour_end(moment: float, limits: Limits) -> float | None:
    """When the billed hour that moment falls in ends; None with BILLING_HOUR=off. clock: the clock's
    hours (Selectel counts each hour's peak use, whole hours of UTC and so of Moscow time); rental:
    whole hours from the server's creation. A moment on the boundary has begun the next hour."""
    if limits.billing_hour == "clock":
        return (moment // HOUR + 1) * HOUR
    if limits.billing_hour == "rental" and limits.rental_started_at is not None:
        started = limits.rental_started_at
        return started + (max(moment - started, 0) // HOUR + 1) * HOUR
    return None


def _trouble(seen: Observation, limits: Limits, llm_before: dict) -> str | None:
    """What keeps the killer from seeing the VM's work, in words; None when nothing does."""
    found = [_swarm_trouble(seen)]
    if seen.installs:
        # ComfyInstallFeatures' pip, ComfyUI-Manager's pip and git, Pickle2SafeTensor: no counter says they run,
        # so the VM is kept while they do, but as trouble, capped: a pip stuck on a lock must not keep it for ever
        more = f" and {len(seen.installs) - 1} more" if len(seen.installs) > 1 else ""
        found.append(f"SwarmUI {_line(seen.installs[0])}{more}")
    if _gpu_unreadable(seen, limits):  # a driver and library of two versions: a job may still run
        found.append(f"GPU not read ({_line(seen.gpu_error or 'no reading')})")
    found.append(_llm_trouble(seen, limits, llm_before))
    if seen.keep_alive_error:
        found.append(f"KEEP_ALIVE_COMMAND {_line(seen.keep_alive_error)}")
    return "; ".join(t for t in found if t) or None


def _swarm_trouble(seen: Observation) -> str | None:
    """Why SwarmUI cannot work, most basic first; None when one of our backends runs."""
    if seen.data_volume:
        return f"data volume {seen.data_volume}"
    if not seen.swarmui:
        return None
    if seen.status is None:
        return f"SwarmUI not answering ({_line(seen.error or 'no reply')})"
    if "error" in seen.status or "error_id" in seen.status:
        return f"SwarmUI answers {_api_error(seen.status)}"
    if seen.backends is not None:
        if not seen.backends:
            return f"no ComfyUI backend of gpu-rent's ({OUR_START_SCRIPT}) in SwarmUI's backends"
        if "running" not in seen.backends:
            return backends_line(seen.backends)
        return silent_comfy(seen)
    # ListBackends unread: only SwarmUI's aggregate, which says errored when any backend errored
    backend = (seen.status.get("backend_status") or {}).get("status")
    if backend not in ("running", "some_loading"):  # some_loading: running, with a model loading
        # SwarmUI's "idle" means no backend started; "loading" is a start under way
        why = f" (ListBackends: {_line(seen.backends_error)})" if seen.backends_error else ""
        return f"backend {backend or 'unknown'}, not running{why}"
    return silent_comfy(seen)


def silent_comfy(seen: Observation) -> str | None:
    """A ComfyUI that runs but does not tell its queue may be working (the Comfy Workflow tab's
    prompts are in no SwarmUI counter): never read as an empty queue, only as capped trouble."""
    if not seen.comfy_silent:
        return None
    ports = ", ".join(str(p) for p in seen.comfy_silent)
    return f"ComfyUI on port {ports} does not tell its queue"


def queued_work(seen: Observation) -> str | None:
    """Work SwarmUI's counters or ComfyUI's own queues tell, in words; None: none."""
    counters = (seen.status or {}).get("status")
    counters = counters if isinstance(counters, dict) else {}
    busy = [f"{int(counters[k])} {k.replace('_', ' ')}" for k in BUSY_COUNTERS if _count(counters.get(k)) > 0]
    if seen.comfy_queue > 0:
        busy.append(f"{seen.comfy_queue} in the ComfyUI queue")
    return ", ".join(busy) or None


def _hung_since(
    seen: Observation, limits: Limits, memory: Memory, queued: str | None, other: str | None
) -> tuple[float | None, bool]:
    """Since when the counters alone tell work with every GPU read and quiet, and whether this tick read them so;
    None when the counters tell none or another sign of work is there. A tick that could not read a GPU neither
    makes work hung nor restarts the wait (an nvidia-smi that fails now and then must not keep a hung VM)."""
    if limits.hung_seconds is None or limits.gpu_percent is None or not queued or other:
        return None, False
    if not seen.gpus or any(utilization is None for _index, utilization, _memory in seen.gpus):
        return memory.hung_since, False
    return (memory.hung_since if memory.hung_since is not None else seen.now), True


def _other_work(seen: Observation, limits: Limits, llm_before: dict) -> str | None:
    """Work on a GPU, in the LLM runtime or by the user's own measure, in words; None: none."""
    busy = []
    if limits.gpu_percent is not None and seen.gpus:
        hot = [(i, u) for i, u, _mem in seen.gpus if u is not None and u > limits.gpu_percent]
        if hot:
            busy.append(", ".join(f"GPU {i} at {u:.0f} %" for i, u in hot))
    llm = _llm_work(seen, limits, llm_before)
    if llm:
        busy.append(llm)
    if seen.keep_alive:
        busy.append("KEEP_ALIVE_COMMAND exits 0")
    growing = _data_growing(seen, limits)
    if growing:
        busy.append(growing)
    return ", ".join(busy) or None


def _data_growing(seen: Observation, limits: Limits) -> str | None:
    """The boot-time grow of the data volume's filesystem, in words, while it counts as work: a resize2fs cut
    short can damage the filesystem, so the VM is not deleted under it; one that outlasts hung_seconds (a stuck
    network disk; with hung work off, the trouble cap: a grow never keeps a VM for ever) is work no more, and
    the data volume not mounted is trouble again."""
    if seen.data_growing_since is None:
        return None
    running = seen.now - seen.data_growing_since
    if running >= (limits.hung_seconds if limits.hung_seconds is not None else limits.cap_seconds):
        return None
    return f"the data volume's filesystem grown at boot (resize2fs, {_minutes(running)} so far)"


def _quiet_gpu(seen: Observation, limits: Limits) -> str | None:
    """What an idle tick knows of the GPUs: 'no GPU work', or why they were not read."""
    if limits.gpu_percent is None or _gpu_unreadable(seen, limits):  # trouble says it
        return None
    if seen.gpus is None:  # no nvidia-smi: a VM without NVIDIA's driver
        return f"GPU not read ({_line(seen.gpu_error or 'no reading')})"
    if not seen.gpus:
        return "no GPU found"
    return "no GPU work"


def _llm_models(seen: Observation) -> tuple[list[tuple[str, float | None]], list[tuple[str, float]]]:
    """Ollama's loaded models: those of a keep-alive that runs out, and those kept for ever."""
    told, forever = [], []
    for name, ends in seen.llm.models if seen.llm else ():
        if ends is not None and ends - seen.now > LLM_FOREVER_SECONDS:
            forever.append((name, ends))
        else:
            told.append((name, ends))
    return told, forever


def _llm_ends(seen: Observation) -> dict:
    told, forever = _llm_models(seen)
    return {name: ends for name, ends in told + forever if ends is not None}


def _llm_moved(name: str, ends: float, before: dict) -> bool:
    """Whether a model's end moved since the last look (or was not seen then): a request ended between."""
    last = before.get(name)
    return not isinstance(last, int | float) or abs(ends - last) > 1


def _llm_used(name: str, ends: float | None, seen: Observation, limits: Limits, before: dict) -> bool:
    """A loaded model is work while its keep-alive is no longer than IDLE_MINUTES (Ollama's 5 min), while a
    request runs past its end, and at the tick its end moved (a request ended: sched.go sets the end anew
    then). A longer keep-alive a client asked for (e.g. "24h") that did not move is no work by itself:
    _llm_trouble counts it, capped, since a request running on it moves nothing until it ends."""
    if ends is None or ends <= seen.now or ends - seen.now <= limits.idle_seconds:
        return True
    return _llm_moved(name, ends, before)


def _llm_unseen(seen: Observation, limits: Limits, before: dict) -> list[tuple[str, float]]:
    """Models kept loaded longer than IDLE_MINUTES whose end did not move: used or not, nothing tells."""
    return [
        (name, ends)
        for name, ends in _llm_models(seen)[0]
        if ends is not None and not _llm_used(name, ends, seen, limits, before)
    ]


def _last_request(ends: float, now: float) -> str:
    """What a for-ever model's end tells (GO_FOREVER_SECONDS): before its first request ends, Ollama reports
    now + the keep-alive (sched.go loadedModels), which reads as a request ending this moment: in use."""
    ended = ends - GO_FOREVER_SECONDS
    return "in use" if now - ended < 2 else f"last request ended {_minutes(now - ended)} ago"


def _llm_work(seen: Observation, limits: Limits, before: dict) -> str | None:
    """'LLM runtime: model llama3.2:1b loaded (keep-alive for 4 min more)', a llama.cpp slot or request at work."""
    llm = seen.llm
    if llm is None or llm.error:
        return None
    told_models, forever_models = _llm_models(seen)
    told = [(name, ends) for name, ends in told_models if _llm_used(name, ends, seen, limits, before)]
    forever = [(name, ends) for name, ends in forever_models if _llm_moved(name, ends, before)]
    more = f" and {len(told) + len(forever) - 1} more" if len(told) + len(forever) > 1 else ""
    if told:
        # Ollama lists a model from its load until its keep-alive ends; a request keeps it however long it
        # runs (server/sched.go: the expiry is set when the last request ends), so a past end means in use
        name, ends = min(told, key=lambda model: _llm_rank(model[1], seen.now))
        if ends is None:
            kept = ""
        elif ends <= seen.now:
            kept = " (in use)"
        else:
            kept = f" (keep-alive for {_minutes(ends - seen.now)} more)"
        return f"LLM runtime: model {_line(name)} loaded{kept}{more}"
    if forever:  # its end moved: a request ended since the last look
        name, ends = max(forever, key=lambda model: model[1])
        return f"LLM runtime: model {_line(name)} used (kept loaded for ever, {_last_request(ends, seen.now)}){more}"
    if llm.awake:
        return "LLM runtime: llama.cpp model loaded (it sleeps once unused for its --sleep-idle-seconds)"
    if llm.slots and any(llm.slots):
        slots = _plural(len(llm.slots), "slot")
        return f"LLM runtime: {sum(llm.slots)} of {len(llm.slots)} llama.cpp {slots} processing"
    if llm.requests:
        return f"LLM runtime: {llm.requests} llama.cpp {_plural(llm.requests, 'request')} processing or deferred"
    return None


def _llm_rank(ends: float | None, now: float) -> tuple[int, float]:
    """The model a reason names first: one in use, else the one kept longest, else one that did not say."""
    if ends is None:
        return 2, 0.0
    return (0, 0.0) if ends <= now else (1, -ends)


def _llm_trouble(seen: Observation, limits: Limits, before: dict) -> str | None:
    """An LLM runtime that runs but cannot tell whether it works."""
    llm = seen.llm
    if llm is None:
        return None
    if llm.error:
        name = LLM_NAMES.get(llm.runtime, llm.runtime)
        if llm.loading:
            return f"LLM runtime: {name} loading a model ({_line(llm.error)})"
        return f"LLM runtime: {name} not read ({_line(llm.error)})" if llm.silent else None
    unseen = _llm_unseen(seen, limits, before)
    if unseen:
        name, ends = max(unseen, key=lambda model: model[1])
        left = _minutes(ends - seen.now)
        return f"LLM runtime: model {_line(name)} kept loaded {left} more and no request ended since, its use unseen"
    return None


def _quiet_llm(seen: Observation) -> str | None:
    """What an idle tick knows of the LLM runtime: 'no Ollama model loaded', or why it was not read."""
    llm = seen.llm
    told, forever = _llm_models(seen)
    if llm is None or llm.silent or told:  # a model of a long keep-alive loaded on an idle tick: trouble says it
        return None
    if forever:  # its end did not move since the last look: no request ended, the clock runs from the last
        name, ends = max(forever, key=lambda model: model[1])
        return f"Ollama model {_line(name)} kept loaded for ever, {_last_request(ends, seen.now)}"
    name = LLM_NAMES.get(llm.runtime, llm.runtime)
    if llm.error:  # nothing listens, or the route is off: it can run nothing, or its work cannot be seen
        return f"{name} not read ({_line(llm.error)})"
    if llm.runtime == "ollama":
        return "no Ollama model loaded"
    if llm.awake is False:
        return "llama.cpp model asleep"
    return "no llama.cpp slot processing" if llm.slots is not None else "no llama.cpp request"


def _plural(count: int, noun: str) -> str:
    return noun if count == 1 else f"{noun}s"


def _gpu_unreadable(seen: Observation, limits: Limits) -> bool:
    return limits.gpu_percent is not None and seen.gpus is None and not seen.gpu_absent


def _typed(seen: Observation) -> tuple[float, str] | None:
    """The newest key typed in a terminal; None for a key from the future (a clock stepped back, a
    `touch`): it would restart the clock at every tick and hold the VM for as long as it lies ahead."""
    if seen.shell_input is None:
        return None
    at, where = seen.shell_input
    if at > seen.now + FUTURE_SLACK:
        return None
    return min(at, seen.now), where


def backends_line(backends: tuple[str, ...] | None) -> str | None:
    """'2 of 2 ComfyUI backends running', with the others' states: '1 of 2 ... running (1 errored)'."""
    if not backends:
        return None
    running = backends.count("running")
    others = sorted({s for s in backends if s != "running"})
    rest = f" ({', '.join(f'{backends.count(s)} {s}' for s in others)})" if others else ""
    noun = "backend" if len(backends) == 1 else "backends"
    return f"{running} of {len(backends)} ComfyUI {noun} running{rest}"


def our_backends(listing: object, start_script: str = OUR_START_SCRIPT) -> tuple[str, ...]:
    """The status of each of gpu-rent's backends in ListBackends' answer (an object keyed by id,
    each value BackendAPI.BackendToNet's shape): self-start ComfyUI from our start script, enabled."""
    found = []
    entries = listing.values() if isinstance(listing, dict) else ()
    for entry in sorted((e for e in entries if isinstance(e, dict)), key=lambda e: str(e.get("id"))):
        if is_ours(entry, start_script) and entry.get("enabled", True) is not False:
            found.append(str(entry.get("status") or "unknown").lower())
    return tuple(found)


def _api_error(answer: dict) -> str:
    """'GetGlobalStatus with bad_permissions (You lack permissions for this route.)'"""
    route = f"{answer['route']} " if answer.get("route") else ""
    error_id, error = answer.get("error_id"), answer.get("error")
    said = f"{error_id} ({_line(error)})" if error_id and error else _line(error_id or error)
    return f"{route}with {said}" if route else f"with an error: {said}"


def _line(text: str) -> str:
    return " ".join(str(text).split())[:160]


def _count(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0
