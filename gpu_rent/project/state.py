"""The phase file `<project>/.gpu-rent/state.json`, its lock, and atomic writes (SPEC §4).

The file is what lets an interrupted command (Ctrl+C, crash, power loss) be resumed by the next one, so it is
only ever replaced whole, and a file that cannot be read is kept aside for inspection rather than reset.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from gpu_rent.util.file_lock import FileLock, Timeout

RUNTIME_DIR = ".gpu-rent"
STATE_FILE = "state.json"
LOCK_FILE = "lock"
# Who holds the lock, for the message of the one who waits: apart from the lock file, which the lock library may
# remove on release (Windows) or fill with its own marker (where fcntl is missing).
HOLDER_FILE = "lock.holder"
# The rest of what lives in RUNTIME_DIR, each named here once (the module in brackets reads and writes it).
LOGS_DIR = "logs"  # every playbook run's log (rental/runner.py)
KNOWN_HOSTS_FILE = "known_hosts"  # the VM's host keys, pinned per boot volume (to_vm/ssh.py, to_vm/killer_view.py)
TOKEN_FILE = "token.json"  # the last login's token (cloud/token_cache.py)
CLOUD_ROUTE_FILE = "cloud-route.json"  # how status last reached its lists (cloud/route.py)
TUNNEL_FILE = "tunnel.json"  # the background tunnel's record (to_vm/tunnel_record.py)
KILLER_SEEN_FILE = "idle-killer-seen.json"  # the killer's last report status read (rental/vm_end.py)
LAST_END_FILE = "last-end.json"  # how the last VM ended (rental/vm_end.py)
UP_FOUND_FILE = "up-found.json"  # up's lookup handed to up.yml, for one run (rental/operations.py)
VERSION = 1


class Phase(StrEnum):
    IDLE = "idle"
    PROVISIONING = "provisioning"
    BOOTSTRAPPING = "bootstrapping"
    READY_CLOUD = "ready_cloud"
    READY_TUNNELED = "ready_tunneled"


# Besides these, every phase may go to IDLE (stop, idle-killer, watchdog, destroy) and to itself (a no-op).
# The backward moves are how `up` resumes: a lost server sends it back to provisioning, a broken SwarmUI to
# bootstrapping, a dropped tunnel to ready_cloud.
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.IDLE: frozenset({Phase.PROVISIONING}),
    Phase.PROVISIONING: frozenset({Phase.BOOTSTRAPPING}),
    Phase.BOOTSTRAPPING: frozenset({Phase.READY_CLOUD, Phase.PROVISIONING}),
    Phase.READY_CLOUD: frozenset({Phase.READY_TUNNELED, Phase.BOOTSTRAPPING, Phase.PROVISIONING}),
    Phase.READY_TUNNELED: frozenset({Phase.READY_CLOUD, Phase.BOOTSTRAPPING, Phase.PROVISIONING}),
}


_PHASE_NAMES = frozenset(phase.value for phase in Phase)


def _is_phase(value: Any) -> bool:
    return isinstance(value, str) and value in _PHASE_NAMES


def allowed(current: Phase, target: Phase) -> bool:
    return target in (current, Phase.IDLE) or target in TRANSITIONS[current]


class StateError(Exception):
    """A state problem the CLI reports as one line."""


class StateCorrupt(StateError):
    def __init__(self, reason: str, moved_to: Path | None = None):
        self.reason = " ".join(reason.split())
        self.moved_to = moved_to
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{RUNTIME_DIR}/{STATE_FILE}"
        if self.moved_to is None:
            return f"{where} is invalid ({self.reason})"
        moved = f"moved to {self.moved_to.name}"
        return f"{where} was unreadable ({self.reason}); {moved}; `gpu-rent status` rebuilds it from the cloud"


class StateLocked(StateError):
    def __init__(self, command: str | None = None, pid: int | None = None, since: datetime | None = None):
        self.command, self.pid, self.since = command, pid, since
        super().__init__(str(self))

    def __str__(self) -> str:
        details = []
        if self.pid is not None:
            details.append(f"pid {self.pid}")
        if self.since is not None:
            # Local wall-clock time: the person reading this compares it with their own clock.
            details.append(f"since {self.since.astimezone().strftime('%H:%M:%S')}")
        who = f": {self.command!r}" if self.command else ""
        extra = f" ({', '.join(details)})" if details else ""
        return f"another gpu-rent command is running in this project{who}{extra}; wait for it or stop it with Ctrl+C"


# --- time -----------------------------------------------------------------------------------------------------------


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso_utc(moment: datetime | None = None) -> str:
    """`2025-11-29T20:31:05Z`; a naive datetime is taken to be UTC already."""
    moment = moment or utc_now()
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# --- the state ------------------------------------------------------------------------------------------------------


def _check(ok: bool, reason: str) -> None:
    if not ok:
        raise StateCorrupt(reason)


def _optional_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _check_transition(item: Any) -> dict[str, Any]:
    _check(isinstance(item, dict), "a transition is not an object")
    _check(_is_phase(item.get("phase")), f"unknown phase {item.get('phase')!r} in transitions")
    _check(isinstance(item.get("at"), str), "a transition has no time")
    try:
        parse_iso(item["at"])
    except ValueError:
        raise StateCorrupt(f"bad transition time {item['at']!r}") from None
    _check(_optional_str(item.get("reason")), "a transition reason is not text")
    return {"phase": item["phase"], "at": item["at"], "reason": item.get("reason")}


@dataclass(frozen=True)
class Scope:
    """Where a login reaches: the project of its token and the region of its compute endpoint. The state records
    it for its resources: a login scoped elsewhere sees none of them, and must not take that for their end."""

    project_id: str | None
    region: str | None

    def __str__(self) -> str:
        return f"project {self.project_id or '(none)'}, region {self.region or '(none)'}"


def _scope_of(data: Any) -> Scope | None:
    if data is None:
        return None
    _check(isinstance(data, dict), "cloud is not an object")
    _check(_optional_str(data.get("project_id")) and _optional_str(data.get("region")), "cloud is not text")
    return Scope(data.get("project_id"), data.get("region"))


@dataclass
class State:
    phase: Phase = Phase.IDLE
    pool: str | None = None
    flavor: str | None = None
    # what bootstrap found, in words: "driver 580.65 on NVIDIA L4", "no NVIDIA GPU visible (...)"
    gpu: str | None = None
    # server, boot_volume, data_volume, floating_ip, floating_ip_address, network, subnet, router,
    # security_group, keypair, snapshot -> cloud id (or address)
    resources: dict[str, str] = field(default_factory=dict)
    # where the resources are; None before a login said so (a state written by a gpu-rent that did not record it)
    cloud: Scope | None = None
    transitions: list[dict[str, Any]] = field(default_factory=list)
    # the long operation in progress: {"command", "step", "pid", "started_at"}; None when nothing runs
    operation: dict[str, Any] | None = None
    version: int = VERSION

    def move_to(self, phase: Phase | str, reason: str | None = None, now: datetime | None = None) -> bool:
        """Change phase and record when and why; False when already there (nothing recorded)."""
        try:
            target = Phase(phase)
        except ValueError:
            raise StateError(f"unknown phase {phase!r}") from None
        if target == self.phase:
            return False
        if not allowed(self.phase, target):
            raise StateError(f"cannot go from {self.phase} to {target}")
        self.phase = target
        self.transitions.append({"phase": str(target), "at": iso_utc(now), "reason": reason})
        return True

    def since(self, phase: Phase | str) -> datetime | None:
        """When the state last entered `phase`, or None if it never did."""
        for item in reversed(self.transitions):
            if item["phase"] == phase:
                return parse_iso(item["at"])
        return None

    def begin_operation(self, command: str, step: str, now: datetime | None = None) -> None:
        self.operation = {"command": command, "step": step, "pid": os.getpid(), "started_at": iso_utc(now)}

    def set_step(self, step: str) -> None:
        if self.operation is None:
            raise StateError(f"no operation in progress to set step {step!r} on")
        self.operation["step"] = step

    def end_operation(self) -> None:
        self.operation = None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "phase": str(self.phase),
            "pool": self.pool,
            "flavor": self.flavor,
            "gpu": self.gpu,
            "resources": dict(self.resources),
            "cloud": None if self.cloud is None else {"project_id": self.cloud.project_id, "region": self.cloud.region},
            "transitions": [dict(item) for item in self.transitions],
            "operation": dict(self.operation) if self.operation is not None else None,
        }

    @classmethod
    def from_json(cls, data: Any) -> State:
        """Build from parsed JSON; anything unexpected raises StateCorrupt (never guessed around)."""
        _check(isinstance(data, dict), "not a JSON object")
        version = data.get("version", VERSION)
        _check(type(version) is int, f"bad version {version!r}")
        _check(version <= VERSION, f"version {version} is newer than this gpu-rent understands")
        _check(_is_phase(data.get("phase")), f"unknown phase {data.get('phase')!r}")
        _check(_optional_str(data.get("pool")), "pool is not text")
        _check(_optional_str(data.get("flavor")), "flavor is not text")
        _check(_optional_str(data.get("gpu")), "gpu is not text")
        resources = data.get("resources", {})
        _check(isinstance(resources, dict), "resources is not an object")
        _check(all(isinstance(v, str) for v in resources.values()), "a resource id is not text")
        transitions = data.get("transitions", [])
        _check(isinstance(transitions, list), "transitions is not a list")
        operation = data.get("operation")
        _check(operation is None or isinstance(operation, dict), "operation is not an object")
        return cls(
            phase=Phase(data["phase"]),
            pool=data.get("pool"),
            flavor=data.get("flavor"),
            gpu=data.get("gpu"),
            resources=dict(resources),
            cloud=_scope_of(data.get("cloud")),
            transitions=[_check_transition(item) for item in transitions],
            operation=dict(operation) if operation is not None else None,
            version=version,
        )


# --- the file and its lock ------------------------------------------------------------------------------------------


def _fsync_dir(directory: Path) -> None:
    # The rename itself lives in the directory; without this a power loss can bring back the old file.
    if not hasattr(os, "O_DIRECTORY"):  # Windows opens no directory as a file; NTFS journals the rename itself
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StateStore:
    def __init__(self, project_dir: Path):
        self.project_dir = Path(project_dir)
        self.dir = self.project_dir / RUNTIME_DIR
        self.path = self.dir / STATE_FILE
        self.lock_path = self.dir / LOCK_FILE
        self.holder_path = self.dir / HOLDER_FILE

    def ensure_dir(self) -> Path:
        """Create `.gpu-rent/` (private) with a `.gitignore` so runtime files never get committed."""
        if self.dir.exists() and not self.dir.is_dir():
            raise StateError(f"{self.dir} is not a folder: gpu-rent keeps its runtime files there; move it away")
        self.dir.mkdir(mode=0o700, exist_ok=True)
        ignore = self.dir / ".gitignore"
        if not ignore.exists():
            ignore.write_text("*\n", encoding="utf-8")
        return self.dir

    def load(self) -> State:
        """The saved state, a fresh one if there is none; StateCorrupt after moving an unreadable file aside."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return State()
        except IsADirectoryError:
            raise StateError(f"{self.path} is a folder, not the state file: move it away") from None
        except NotADirectoryError:
            raise StateError(
                f"{self.dir} is not a folder: gpu-rent keeps its runtime files there; move it away"
            ) from None
        except OSError as e:
            raise StateError(f"{self.path}: cannot read it ({e.strerror})") from None
        try:
            return State.from_json(json.loads(raw.decode("utf-8")))
        except UnicodeDecodeError:
            reason = "not UTF-8 text"
        except json.JSONDecodeError as exc:
            reason = f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        except RecursionError:  # json's parser recurses per bracket: no state of ours nests deeper than a few
            reason = "nested too deeply to be a state file"
        except StateCorrupt as exc:
            reason = exc.reason
        raise StateCorrupt(reason, moved_to=self._move_aside())

    def peek(self) -> State | None:
        """The saved state, None when there is none or it cannot be read: a look that changes nothing (load
        reports an unreadable file and moves it aside, once, for the command that goes on to use it)."""
        try:
            return State.from_json(json.loads(self.path.read_bytes().decode("utf-8")))
        except (OSError, ValueError, RecursionError, StateCorrupt):
            return None

    def _move_aside(self) -> Path:
        stamp = utc_now().strftime("%Y%m%dT%H%M%SZ")
        target = self.path.with_name(f"{STATE_FILE}.corrupt-{stamp}")
        counter = 1
        # Two corrupt files within one second must not overwrite each other's evidence.
        while target.exists():
            target = self.path.with_name(f"{STATE_FILE}.corrupt-{stamp}-{counter}")
            counter += 1
        os.rename(self.path, target)
        return target

    def save(self, state: State) -> None:
        """Replace the file atomically: readers see the old state or the new one, never a mix."""
        self.ensure_dir()
        data = (json.dumps(state.to_json(), indent=2) + "\n").encode("utf-8")
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{STATE_FILE}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                if hasattr(os, "fchmod"):  # POSIX; Windows has no modes to set
                    os.fchmod(out.fileno(), 0o600)
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _fsync_dir(self.dir)

    def holder(self) -> StateLocked:
        """Who the holder file says holds the lock (fields None when unknown); for messages only."""
        try:
            record = json.loads(self.holder_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return StateLocked()
        if not isinstance(record, dict):
            return StateLocked()
        pid = record.get("pid") if type(record.get("pid")) is int else None
        command = record.get("command") if isinstance(record.get("command"), str) else None
        try:
            since = parse_iso(record["since"])
        except (KeyError, TypeError, ValueError):
            since = None
        return StateLocked(command, pid, since)

    @contextlib.contextmanager
    def lock(self, command: str, wait: float = 3.0) -> Iterator[None]:
        """Hold the project's lock while `command` changes things; StateLocked if not free within `wait` s.

        The lock belongs to an open file (flock, or LockFileEx on Windows), so the system releases it when the
        holder dies however it dies: a leftover lock file is never a stale lock. Where fcntl is missing, the lock
        file names the holder's process instead, and a waiter takes over the lock of one that is gone.
        """
        self.ensure_dir()
        lock = FileLock(self.lock_path, mode=0o600, thread_local=False)
        try:
            lock.acquire(timeout=max(wait, 0), poll_interval=0.1)
        except Timeout:
            raise self.holder() from None
        try:
            self._write_holder({"pid": os.getpid(), "command": command, "since": iso_utc()})
            yield
        finally:
            try:
                # Cleared before release so a record never outlives the lock it describes (normal exits only).
                self._write_holder(None)
            finally:
                lock.release()

    def _write_holder(self, record: dict[str, Any] | None) -> None:
        text = "" if record is None else json.dumps(record)
        fd = os.open(self.holder_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)


def load_state(store: StateStore, say: Callable[[str], None]) -> State:
    """The state file, or a fresh one when it was corrupt (moved aside, never silently reset)."""
    try:
        return store.load()
    except StateCorrupt as e:
        say(str(e))
        return State()
