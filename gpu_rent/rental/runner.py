"""Run a playbook through ansible-runner: events in, progress and a log out.

The wrapper changes the cloud itself only to start what a playbook then does whole (up_head_start.py,
stop_head_start.py); it runs playbooks/<name>.yml here.
Events feed a callback (the CLI's Rich progress), every event's text goes to
`.gpu-rent/logs/`, `set_stats` results reach the caller as soon as a role
records an id, and Ctrl+C stops the whole process group: SIGTERM, then SIGKILL
five seconds later.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gpu_rent.on_vm import progress_line
from gpu_rent.on_vm.progress_line import ProgressLine
from gpu_rent.project.state import LOGS_DIR, RUNTIME_DIR
from gpu_rent.rental import orphans
from gpu_rent.util.checkout import ROOT
from gpu_rent.util.lazy import lazy
from gpu_rent.util.pids import pid_alive

PLAYBOOKS = ROOT / "playbooks"
GRACE_SECONDS = 5.0
# ansible_runner imports fcntl on every platform: loaded only when a playbook runs, so the laptop-only
# commands start where fcntl is missing (Windows; tests/unit/test_no_posix_modules.py)
ansible_runner = lazy("ansible_runner")


# ansible-runner records the job's whole environment in its artifacts: no cloud
# auth (every OS_*) and no token may be in it. The playbook gets the auth from
# the 0600 file the vars plugin reads and deletes.
def _secret(name: str) -> bool:
    return name.startswith("OS_") or name in ("CIVITAI_TOKEN", "HF_TOKEN")


@dataclass(frozen=True)
class Failure:
    task: str
    host: str
    message: str

    def __str__(self) -> str:
        return f"task '{self.task}' failed on {self.host}: {self.message}"


@dataclass
class PlaybookResult:
    ok: bool
    canceled: bool = False
    failure: Failure | None = None
    changed: dict[str, int] = field(default_factory=dict)  # host -> changed tasks
    log: Path | None = None


@dataclass(frozen=True)
class Progress:
    """What the CLI shows while a playbook runs."""

    task: str
    host: str | None
    started: float
    line: ProgressLine | None = None  # a remote step's `::gpu-rent-progress` line, when it printed one


# Events whose result may carry a remote step's progress line: an `until` loop's retries poll a long step.
_PROGRESS_EVENTS = ("runner_retry", "runner_on_async_poll", "runner_on_ok", "runner_item_on_ok")


def progress_in(event: dict) -> ProgressLine | None:
    """The latest `::gpu-rent-progress` line in an event's task output, if any."""
    if event.get("event") not in _PROGRESS_EVENTS:
        return None
    res = (event.get("event_data") or {}).get("res") or {}
    text = res.get("stdout") if isinstance(res.get("stdout"), str) else None
    if text is None and isinstance(res.get("stdout_lines"), list):
        text = "\n".join(str(line) for line in res["stdout_lines"])
    return progress_line.last(text)


def failure_message(res: dict) -> str:
    """The module's own words, one line; for a loop, the first failed item's."""
    failed_items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    if failed_items:
        return failure_message(failed_items[0])
    message = res.get("msg") or res.get("message") or res.get("stderr") or res.get("reason") or "failed"
    if message == "non-zero return code" and (res.get("stderr") or res.get("stdout")):
        # a command's own last words say more than Ansible's summary of them
        said = [line.strip() for line in str(res.get("stderr") or res.get("stdout")).splitlines() if line.strip()]
        message = f"exit code {res.get('rc')}: {said[-1]}"
    if isinstance(message, list | dict):
        message = json.dumps(message)
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return " ".join(lines)[:500] if lines else "failed"


def unreachable_message(said: str) -> str:
    """Ansible's words for a host SSH cannot reach, as what it means to the user and what to do."""
    said = said.removeprefix("Task failed: ").rstrip(": ")
    return f"the VM does not answer over SSH ({said}); once it does, the same command resumes"


class _Cancel:
    """Ctrl+C: SIGTERM to the playbook's process group, SIGKILL (by the runner) after the grace."""

    def __init__(self, requested: threading.Event | None = None) -> None:
        self.requested = requested or threading.Event()
        self.since: float | None = None

    def __call__(self) -> bool:
        if not self.requested.is_set():
            return False
        if self.since is None:
            self.since = time.monotonic()
            for pid in _children("ansible-playbook"):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(os.getpgid(pid), signal.SIGTERM)
        return time.monotonic() - self.since >= GRACE_SECONDS or not _children("ansible-playbook")


def end_orphans(project_dir: Path) -> int:
    """End what a killed command's playbook still runs, before a new one starts: two plays at once
    would race on the same server. Only ever called under the project's lock, so no live command owns them.
    """
    return orphans.end(orphans.marked(orphans.PROJECT_MARK, str(project_dir)))


@contextlib.contextmanager
def _ended_with_us(token: str, temp: Path) -> Iterator[None]:
    """A watcher that ends this run's playbook should this process die first (kill -9, a crash)."""
    read_end, write_end = os.pipe()
    try:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "gpu_rent.rental.orphans", str(read_end), token, str(temp)],
            pass_fds=(read_end,), start_new_session=True,  # Ctrl+C on the terminal is not for it
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        os.close(read_end)
    try:
        yield
    finally:
        os.close(write_end)  # the watcher sees the end, finds the run over, and goes
        with contextlib.suppress(subprocess.TimeoutExpired):
            watcher.wait(timeout=10)


def _children(name: str) -> list[int]:
    me = os.getpid()
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == me and name.encode() in cmdline:
            found.append(int(stat.parent.name))
    return found


@contextlib.contextmanager
def _auth_file(temp: Path, auth: dict) -> Iterator[Path]:
    """The resolved cloud auth for the vars plugin, 0600 in the run's own temp, gone after the run."""
    path = temp / "auth.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(auth, f)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def _run_temp(path: Path) -> Iterator[Path]:
    """The run's own temporary folder (the handed-over auth, Ansible's local temp, TMPDIR), 0700, gone after the run.

    A module's payload carries the idle-killer's credential (the killer's arm takes it on stdin), and Ansible
    stages payloads in its local temp when it does not pipeline (an operator's config, a `copy content=`): in
    ~/.ansible/tmp a killed run would leave it for good; here the next run (or the orphan watcher) clears it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.iterdir():  # left by a run that was killed
        pid = old.name.partition("-")[0]
        if not (pid.isdigit() and pid_alive(int(pid))):
            shutil.rmtree(old, ignore_errors=True)
    path.mkdir(mode=0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _without_secrets() -> Iterator[None]:
    saved = {k: os.environ.pop(k) for k in list(os.environ) if _secret(k)}
    try:
        yield
    finally:
        os.environ.update(saved)


def run_playbook(
    name: str,
    *,
    project_dir: Path,
    cloud_auth: dict,
    extravars: dict | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    on_stats: Callable[[dict], None] | None = None,
    cancel_event: threading.Event | None = None,
) -> PlaybookResult:
    """Run playbooks/NAME.yml for the project; Ctrl+C (main thread) or `cancel_event` cancels it."""
    runtime = project_dir / RUNTIME_DIR
    (runtime / LOGS_DIR).mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_path = runtime / LOGS_DIR / f"{stamp}-{name}.log"
    result = PlaybookResult(ok=False, log=log_path)
    failures: list[Failure] = []
    cancel = _Cancel(cancel_event)
    current = {"task": "starting", "started": time.monotonic()}

    def handle(event: dict) -> bool:
        text = event.get("stdout")
        if text:
            log.write(text + "\n")
            log.flush()
        kind = event.get("event")
        data = event.get("event_data", {})
        line = progress_in(event)
        if line is not None and on_progress:
            on_progress(Progress(current["task"], data.get("host"), current["started"], line))
        if kind == "playbook_on_task_start":
            current.update(task=data.get("task", ""), started=time.monotonic())
            if on_progress:
                on_progress(Progress(current["task"], None, current["started"]))
        elif kind == "runner_on_start" and on_progress:
            on_progress(Progress(current["task"], data.get("host"), current["started"]))
        elif kind == "runner_on_ok":
            stats = (data.get("res") or {}).get("ansible_stats", {}).get("data")
            if stats and on_stats:
                on_stats(stats)
        elif kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            message = failure_message(data.get("res", {}))
            if kind == "runner_on_unreachable":
                message = unreachable_message(message)
            failures.append(Failure(data.get("task", "?"), data.get("host", "?"), message))
        elif kind == "playbook_on_stats":
            result.changed = {h: n for h, n in (data.get("changed") or {}).items()}
        return False  # the log is ours; ansible-runner need not keep the events in memory

    # Ctrl+C cancels the play; only the main thread may take signals (the watchdog runs plays in a thread)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main_thread else None
    if main_thread:
        signal.signal(signal.SIGINT, lambda *_: cancel.requested.set())
    token = uuid.uuid4().hex
    temp = runtime / "runner" / "tmp" / f"{os.getpid()}-{token}"
    try:
        with (
            _ended_with_us(token, temp),
            open(log_path, "w", encoding="utf-8") as log,
            _run_temp(temp),
            _auth_file(temp, cloud_auth) as auth_path,
            _without_secrets(),
        ):
            os.chmod(log_path, 0o600)
            runner = ansible_runner.run(
                private_data_dir=str(runtime / "runner"),
                playbook=str(PLAYBOOKS / f"{name}.yml"),
                extravars=extravars or {},
                envvars={
                    # the ansible-playbook of this Python's environment, whether or not it is on PATH
                    "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
                    "GPU_RENT_PROJECT": str(project_dir),
                    orphans.PROJECT_MARK: str(project_dir),
                    orphans.RUN_MARK: token,
                    "GPU_RENT_AUTH_FILE": str(auth_path),
                    "ANSIBLE_LOCAL_TEMP": str(temp),
                    "TMPDIR": str(temp),  # the payload folders of modules run here
                    "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                    "ANSIBLE_NOCOLOR": "1",
                    "ANSIBLE_LOCALHOST_WARNING": "false",
                    "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
                },
                inventory=str(ROOT / "inventory" / "localhost.yml"),
                quiet=True,
                event_handler=handle,
                cancel_callback=cancel,
                rotate_artifacts=5,
                # how often the runner asks cancel_callback: Ctrl+C acts within a quarter second
                settings={"pexpect_timeout": 0.25},
                suppress_env_files=True,
            )
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)
    result.canceled = cancel.requested.is_set()
    result.ok = runner.status == "successful" and not result.canceled
    if not result.ok and not result.canceled:
        result.failure = failures[-1] if failures else Failure("ansible-playbook", "localhost", _tail(log_path))
    return result


def _tail(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "ansible-playbook failed before its first task"
