"""The laptop's side while the VM runs: the tunnel and the watchdog, in one process.

`gpu-rent tunnel` runs it in the foreground (Ctrl+C closes the tunnel and never stops the VM);
`up` and `open` start it in the background. It writes `.gpu-rent/tunnel.json` at every change:
where it forwards, what it is doing and why; `status` and `stop` read it. The watchdog looks at
the server every WATCH_SECONDS: shelved or stopped (a preemption) → the same server is brought
back and the tunnel reopens; ERROR → the server is deleted (volumes kept) and it exits with the reason;
gone → the tunnel closes, saying who deleted it (gpu_rent/rental/vm_end.py): while it forwards, it keeps the
idle-killer's last report.

One file past 500 lines on purpose: the Session's tunnel, watchdog and record share one event loop and one
state, and the background start below reads the record that Session writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import asyncssh
import openstack.exceptions
from keystoneauth1 import exceptions as ksa_exceptions

from gpu_rent.cloud.connect import CloudUnreachable, connect
from gpu_rent.project.errors import ConfigError
from gpu_rent.project.settings import Settings, resource_names
from gpu_rent.project.state import Phase, StateError, StateLocked, StateStore, load_state
from gpu_rent.rental import vm_end
from gpu_rent.rental.operations import OperationFailed, Rental
from gpu_rent.to_vm import ssh
from gpu_rent.to_vm.killer_view import STATUS_FILE
from gpu_rent.to_vm.tunnel import Forward, PortBusy, Tunnel
from gpu_rent.to_vm.tunnel_record import (
    _hold_alive,
    _write_record,
    llm_url,
    read_record,
    record_path,
    tunnel_alive,
    url,
)
from gpu_rent.util.notify import notify
from gpu_rent.util.pids import pid_alive
from gpu_rent.watch.decision import WATCH_SECONDS, Act, Blind, Verdict, blind_killer, judge, may_recover, token_due

# what the cloud or keystoneauth raise after a login: a hiccup to look past, not the VM's fault
CLOUD_ERRORS = (openstack.exceptions.SDKException, ksa_exceptions.ClientException)
LOG_FILE = "logs/tunnel.log"
SENTINEL_LOG = "logs/sentinel.log"
# How often the --stop-on-exit sentinel looks whether the tunnel process still lives.
SENTINEL_SECONDS = 2.0
# How long a read of the idle-killer's report over the tunnel's connection may take.
KILLER_READ_SECONDS = 10.0
# How long `up`/`open` wait for a background tunnel to forward before they say why it did not.
START_TIMEOUT = 60.0


class SessionEnded(Exception):
    """The session ends; `code` is the exit code, the message says why."""

    def __init__(self, message: str, code: int, gone: bool = False):
        super().__init__(message)
        self.code = code
        self.gone = gone  # the server no longer exists


def move_phase(store: StateStore, to: Phase, only_from: set[Phase], why: str, say: Callable[[str], None]) -> None:
    """Move the phase when no other command holds the project (that command sets it itself)."""
    with contextlib.suppress(StateLocked, StateError, OSError), store.lock("tunnel", wait=1.0):
        state = load_state(store, say)
        if state.phase in only_from:
            state.move_to(to, why)
            store.save(state)


# ---------------------------------------------------------------------------------------------- the session


class Session:
    """The tunnel plus the watchdog; `run()` returns when the user closes it or the VM is gone."""

    def __init__(
        self,
        settings: Settings,
        log: Callable[[str], None],
        watch_seconds: float = WATCH_SECONDS,
        forward: bool = True,
        stop_on_exit: bool = False,
    ):
        self.settings = settings
        self.stop_on_exit = stop_on_exit
        self.forward = forward  # False: the watchdog alone (`gpu-rent watchdog`), no port, no record
        self._log = log
        self.watch_seconds = watch_seconds
        self.store = StateStore(settings.project_dir)
        self.record: dict = {
            "pid": os.getpid(),
            "url": url(settings),
            "llm_url": llm_url(settings),
            "local_port": settings.local_port,
            "remote_port": settings.remote_port,
            "started_at": time.time(),
            "state": "connecting",
            "message": "",
            "recoveries": [],
            "stop_on_exit": stop_on_exit,
        }
        self.tunnel: Tunnel | None = None
        self.target: ssh.Target | None = None
        self.server_id: str | None = None
        self._last_verdict = ""
        # the killer's last report read this session, when it was first read (laptop time), and how many
        # reports in a row said its delete failed: what _judge_killer acts on
        self._report: dict | None = None
        self._report_seen_at = 0.0
        self._failed_ticks = 0
        self._told = ""  # the last blind-killer notice given, so it is given once
        self._told_delete = ""  # the last delete the user was notified of, so a retried one is told once
        self._cloud = None
        self._alive = None  # the life lock's open file, held until the process ends
        self.cancel = threading.Event()  # set when the session ends: cancels a recovery's playbook

    def log(self, message: str) -> None:
        self._log(message)

    def _update(self, **fields) -> None:
        self.record.update(fields, updated_at=time.time())
        if not self.forward:
            return
        if self.tunnel is not None:
            self.record["forwarded"] = self.tunnel.opened
        with contextlib.suppress(OSError):
            _write_record(self.settings, self.record)

    def _phase(self, to: Phase, only_from: set[Phase], why: str) -> None:
        move_phase(self.store, to, only_from, why, self.log)

    def _on_up(self) -> None:
        self._update(state="forwarding", message=f"{self.record['url']} → VM 127.0.0.1:{self.settings.remote_port}")
        self.log(f"forwarding {self.record['url']} → the VM's 127.0.0.1:{self.settings.remote_port}")
        # the state file's lock may be held by another command: never on the loop that forwards
        asyncio.get_running_loop().run_in_executor(
            None, self._phase, Phase.READY_TUNNELED, {Phase.READY_CLOUD}, "the tunnel forwards"
        )

    def _target(self) -> ssh.Target:
        state = load_state(self.store, self.log)
        try:
            target = ssh.Target.of(self.settings, state.resources)
        except ssh.SshError as e:
            raise SessionEnded(f"{e}", 2) from None
        self.server_id = state.resources.get("server")
        return target

    async def run(self) -> int:
        self.target = self._target()
        if self.forward:
            self._alive = _hold_alive(self.settings)
            if self._alive is None:
                raise SessionEnded("a tunnel of this project already runs (gpu-rent tunnel --close closes it)", 3)
        s = self.settings
        # the LLM runtime's port rides the same SSH connection: one reconnect, one watchdog for both
        also = (Forward(s.llm_local_port, s.llm_remote_port, "LLM_LOCAL_PORT"),) if llm_url(s) else ()
        self.tunnel = Tunnel(lambda: ssh.connect(self.target), s.local_port, s.remote_port, log=self.log, also=also)
        if self.forward:
            try:
                await self.tunnel.listen()
            except PortBusy as e:
                raise SessionEnded(str(e), 2) from None
            self._update(state="connecting", message=f"SSH to {self.target.address}")
        if self.stop_on_exit:
            sentinel = _spawn(self.settings, ["sentinel", "--pid", str(os.getpid())], SENTINEL_LOG)
            self.record["sentinel_pid"] = sentinel.pid
            self.log(f"--stop-on-exit: should this process die uncleanly, the VM is stopped (sentinel pid "
                     f"{self.record['sentinel_pid']})")  # fmt: skip
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        # SIGHUP: the terminal of a foreground tunnel closed; a clean end all the same
        for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is None:
                continue
            with contextlib.suppress(NotImplementedError, RuntimeError):  # Windows: Ctrl+C arrives as an exception
                loop.add_signal_handler(sig, stopping.set)
        self.stopping = stopping
        tasks = {asyncio.create_task(self._watch(), name="watchdog"), asyncio.create_task(stopping.wait(), name="stop")}
        if self.forward:
            tasks.add(asyncio.create_task(self.tunnel.run(on_up=self._on_up), name="tunnel"))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            first = done.pop()
            if first.get_name() == "stop":
                what = "closed" if self.forward else "watchdog ended"
                return self._end(f"{what} by the user; the VM keeps running (gpu-rent stop stops it)", 0)
            try:
                first.result()
            except ssh.HostKeyChanged as e:
                return self._end(str(e), 1)
            except SessionEnded as e:
                return self._end(str(e), e.code, gone=e.gone)
            return self._end("ended", 0)
        except asyncio.CancelledError:  # Ctrl+C on Windows, through asyncio.run
            return self._end("closed by the user; the VM keeps running (gpu-rent stop stops it)", 0)
        finally:
            self.cancel.set()  # a recovery's playbook in its thread: SIGTERM to its processes, then SIGKILL
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.tunnel.close()

    def _end(self, message: str, code: int, gone: bool = False) -> int:
        self._update(state="closed", message=message, exit_code=code)
        self.log(message)
        if gone:  # deleted by the idle-killer or a stop elsewhere: nothing runs, nothing to tunnel to
            self._phase(Phase.IDLE, set(Phase) - {Phase.IDLE}, "the watchdog saw the server gone")
        elif self.forward:
            self._phase(Phase.READY_CLOUD, {Phase.READY_TUNNELED}, "the tunnel closed")
        if code != 0 or gone:
            notify("gpu-rent: the tunnel closed", message[:200])
        return code

    # ------------------------------------------------------------------------------------------ watchdog

    def _server(self):
        """(status, vm_state, task_state, fault) of this project's server; status None when it is gone."""
        if self._cloud is None:
            self._cloud = connect(self.settings)
        self._renew_token()
        compute = self._cloud.compute
        server = compute.find_server(self.server_id, ignore_missing=True) if self.server_id else None
        if server is None:
            server = compute.find_server(resource_names(self.settings.name)["server"], ignore_missing=True)
        if server is None:
            return None, None, None, ""
        server = compute.get_server(server.id)
        self.server_id = server.id
        fault = (server.fault or {}).get("message", "") if isinstance(server.fault, dict) else ""
        return server.status, server.vm_state, server.task_state, fault

    def _renew_token(self) -> None:
        auth = self._cloud.session.auth
        access = auth.get_access(self._cloud.session)
        expires = access.expires.timestamp() if access and access.expires else None
        if token_due(expires, time.time()):
            auth.invalidate()
            auth.get_access(self._cloud.session)
            self.log("cloud token renewed before it expired")

    async def _watch(self) -> None:
        failures = 0
        while True:
            await asyncio.sleep(self.watch_seconds)
            try:
                status, vm_state, task_state, fault = await asyncio.to_thread(self._server)
            except Exception as e:  # the cloud down for a while is not the VM down: say so, look again
                failures += 1
                self._cloud = None
                if failures in (1, 5) or failures % 20 == 0:
                    self.log(
                        f"watchdog: the cloud does not answer ({type(e).__name__}: {str(e)[:200]}); the tunnel stays"
                    )
                continue
            failures = 0
            self._update()  # the connection count, and a heartbeat `status` can read
            verdict = judge(status, vm_state, task_state, fault)
            if verdict.why != self._last_verdict and verdict.act is not Act.OK:
                self.log(f"watchdog: {verdict.why}")
            self._last_verdict = verdict.why
            if verdict.act is Act.OK:
                await self._keep_killer_report()
                await self._judge_killer()
            if verdict.act is Act.GONE:
                why = await asyncio.to_thread(self._gone_why, verdict.why)
                raise SessionEnded(f"{why}: the tunnel closes; gpu-rent up rents it again", 0, gone=True)
            # a failed delete stays for the next tick: the session ends only once the failed server is not billing
            if verdict.act is Act.FATAL:
                await self._end_failed(verdict)
            if verdict.act is Act.RECOVER:
                await self._recover(verdict.why)

    async def _keep_killer_report(self) -> None:
        """The killer's report, read over the tunnel's own connection: when the VM goes, it says who and why."""
        conn = await self.tunnel.connection(0) if self.forward and self.tunnel else None
        report = None
        if conn is not None:
            try:
                result = await asyncio.wait_for(conn.run(f"cat {STATUS_FILE}", check=False), KILLER_READ_SECONDS)
                report = json.loads(result.stdout or "")
            except (OSError, ValueError, TimeoutError, asyncssh.Error):
                report = None
        if not isinstance(report, dict) or report.get("server_id") != self.server_id:
            # Not read (SSH down or slow, a reboot's empty /run, a laptop just awake): nothing is known of the
            # killer, and a report read before must never be taken for its silence. _judge_killer waits.
            self._report, self._failed_ticks = None, 0
            return
        await asyncio.to_thread(vm_end.write, self.settings.runtime_dir, vm_end.SEEN_FILE, report)
        if report.get("tick_at") != (self._report or {}).get("tick_at"):  # a tick since the last read
            failed = report.get("action") == "delete" and str(report.get("acted")).startswith(vm_end.DELETE_FAILED)
            self._failed_ticks = self._failed_ticks + 1 if failed else 0
            self._report, self._report_seen_at = report, time.time()

    async def _judge_killer(self) -> None:
        """The killer's last report, judged (watch/decision.blind_killer): a killer that cannot carry out its
        own verdict is told to the user, and its VM deleted with the user's credential, volumes kept."""
        if self._report is None:
            return
        judged = blind_killer(self._report, self._report_seen_at, time.time(), self._failed_ticks)
        if judged is None:
            return
        act, why = judged
        if act is Blind.NOTIFY:
            if why != self._told:
                self._told = why
                self.log(f"watchdog: {why}; while this tunnel runs, the watchdog deletes the VM at its deadline")
                notify("gpu-rent: the idle-killer cannot delete the VM", why)
            return
        # deleted, or the project names another server: this report is done with; a failed delete keeps it, and
        # the next tick tries again without its silence counted anew
        if await self._delete_server(why, "gpu-rent: deleting the VM its idle-killer could not") is not False:
            self._report = None

    async def _end_failed(self, verdict: Verdict) -> None:
        """A server in ERROR: deleted, then the session ends; a delete that failed is tried at the next tick."""
        deleted = await self._delete_server(verdict.why, "gpu-rent: the VM failed")
        if deleted is None:  # not this project's server any more: it may still bill, and status names it
            raise SessionEnded(f"{verdict.cause}: not deleted (the project now names another server); "
                               "`gpu-rent status` says what bills", 1)  # fmt: skip
        if deleted:
            raise SessionEnded(verdict.why, 1)

    async def _delete_server(self, why: str, title: str) -> bool | None:
        """The server deleted with the user's credential, the volumes kept, its end written for status: True
        when deleted, False when the delete failed (the next tick tries again), None when the project now
        names another server (stop deletes the state's server: it must be this one)."""
        server = self.server_id
        with contextlib.suppress(StateError, OSError):
            recorded = load_state(self.store, self.log).resources.get("server")
            if recorded != server:
                self.log(f"watchdog: {why}; not deleted: the project now names server {recorded}, not {server}")
                return None
        self.log(f"watchdog: {why}; deleting the server with your credential (the volumes stay)")
        if why != self._told_delete:  # once: a delete that fails is tried every tick, the user told the first time
            self._told_delete = why
            notify(title, why)
        rental = Rental(self.settings, say=self.log, progress=_logged(self.log), cancel=self.cancel)
        try:
            await asyncio.to_thread(rental.stop)
        except (StateLocked, CloudUnreachable, OperationFailed, ConfigError, StateError, OSError, *CLOUD_ERRORS) as e:
            self.log(f"watchdog: could not delete the server: {e}; trying again at the next tick")
            return False
        end = vm_end.stopped(server, time.time(), "watchdog", why)
        await asyncio.to_thread(vm_end.write, self.settings.runtime_dir, vm_end.END_FILE, end)
        return True

    def _gone_why(self, why: str) -> str:
        """The server is gone: who deleted it, when and why, as status will tell it (kept for status)."""
        if not self.server_id:
            return why
        return f"the server was {vm_end.line(vm_end.settle(self.settings.runtime_dir, self._cloud, self.server_id))}"

    async def _recover(self, why: str) -> None:
        now = time.time()
        if not may_recover(self.record["recoveries"], now):
            raise SessionEnded(f"{why}; brought back {len(self.record['recoveries'])} times within the hour: "
                               "giving up (the pool has no room); `gpu-rent up` tries again", 1)  # fmt: skip
        self.record["recoveries"] = [*self.record["recoveries"], now]  # attempts count, not only successes
        self._report, self._failed_ticks = None, 0  # the VM before the stop said it: its silence means nothing now
        self.tunnel.paused = True
        self.tunnel.drop()
        self._update(state="recovering", message=why)
        rental = Rental(self.settings, say=self.log, progress=_logged(self.log), cancel=self.cancel)
        extra = {"gpu_rent_reuse_only": True, "bootstrap_light": True}
        try:
            await asyncio.to_thread(rental.up, lambda items: False, extra)
        except (StateLocked, CloudUnreachable, *CLOUD_ERRORS) as e:
            # another command acts (it may be the user's own up), or the cloud hiccups: look again
            self.log(f"watchdog: {e}; looking again at the next tick")
            self._update(state="connecting", message=f"SSH to {self.target.address}")
            return
        except (OperationFailed, ConfigError, StateError, OSError) as e:
            raise SessionEnded(f"could not bring the VM back: {e}", 1) from None
        finally:
            self.tunnel.paused = False
        self.target = self._target()
        self.log("the VM is back with the same disks; reopening the tunnel")
        notify("gpu-rent: SwarmUI is back", f"after: {why.split(' (')[0]}; {self.record['url']}")


def run_foreground(
    settings: Settings,
    log: Callable[[str], None],
    watch_seconds: float = WATCH_SECONDS,
    forward: bool = True,
    stop_on_exit: bool = False,
) -> int:
    try:
        return asyncio.run(Session(settings, log, watch_seconds, forward, stop_on_exit).run())
    except KeyboardInterrupt:  # Windows, where no signal handler is installed
        return 0


# ---------------------------------------------------------------------------------------------- background


def _spawn(settings: Settings, args: list[str], log_file: str) -> subprocess.Popen:
    """`gpu-rent ARGS` for this project as a detached process, its output appended to log_file."""
    log = settings.runtime_dir / log_file
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "gpu_rent", *args, "--project", str(settings.project_dir)]
    detach = (
        {"creationflags": subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP}
        if os.name == "nt"
        else {"start_new_session": True}  # Ctrl+C in the terminal that started it does not reach it
    )
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, **detach)


def start_background(
    settings: Settings, watch_seconds: float = WATCH_SECONDS, timeout: float = START_TIMEOUT, stop_on_exit: bool = False
) -> dict:
    """Start the session as a detached process and wait until it forwards; its record, or SessionEnded."""
    log = settings.runtime_dir / LOG_FILE
    args = ["tunnel", "--watch-seconds", str(watch_seconds), *(["--stop-on-exit"] if stop_on_exit else [])]
    proc = _spawn(settings, args, LOG_FILE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = read_record(settings)
        # recovering: the watchdog is bringing a shelved VM back; the tunnel follows by itself
        if record and record.get("pid") == proc.pid and record.get("state") in ("forwarding", "recovering"):
            return record
        if proc.poll() is not None:
            raise SessionEnded(f"the tunnel did not start: {_last_line(log)}", proc.returncode or 1)
        time.sleep(0.1)
    proc.terminate()  # a tunnel that cannot reach the VM is not left retrying unseen
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)
    raise SessionEnded(f"the tunnel did not forward within {timeout:.0f}s: {_last_line(log)}", 1)


def _last_line(log: Path) -> str:
    with contextlib.suppress(OSError):
        lines = [x for x in log.read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()]
        if lines:
            return lines[-1].removeprefix("error: ")
    return f"see {log}"


def close_background(settings: Settings, timeout: float = 5.0) -> dict | None:
    """Close this project's background tunnel (the VM keeps running); its record, or None if none ran."""
    record = read_record(settings)
    if record is None:
        return None
    pid = int(record["pid"])
    with contextlib.suppress(OSError):  # gone meanwhile, or (never ours) not ours to signal
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while tunnel_alive(settings) and time.monotonic() < deadline:
        time.sleep(0.05)
    if tunnel_alive(settings):
        with contextlib.suppress(OSError):
            os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
    return record


# ---------------------------------------------------------------------------------------------- --stop-on-exit


def sentinel(settings: Settings, pid: int, say: Callable[[str], None], tick: float = SENTINEL_SECONDS) -> int:
    """Wait for the tunnel process `pid` to end; when it ended uncleanly, stop the VM.

    Clean ends (Ctrl+C, `tunnel --close`, `stop`, the VM gone or in ERROR) write "closed" into the
    record first; a kill -9, a crash or an out-of-memory kill leave it as it was, and then nobody
    would be watching a billing VM but its idle-killer.
    """
    while pid_alive(pid) and tunnel_alive(settings):  # the life lock also covers a reused pid
        time.sleep(tick)
    try:
        record = json.loads(record_path(settings).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    if record.get("pid") == pid and record.get("state") == "closed":
        say(f"the tunnel process {pid} ended cleanly ({record.get('message')}); the VM keeps running")
        return 0
    say(f"the tunnel process {pid} ended uncleanly (its record says {record.get('state')!r}): stopping the VM")
    rental = Rental(settings, say=say, progress=_logged(say))
    for attempt in range(3):
        try:
            rental.stop()
        except StateLocked as e:  # another command is acting; it may be the stop itself
            say(f"{e}; trying again")
            time.sleep(10 * (attempt + 1))
            continue
        except (OperationFailed, CloudUnreachable, ConfigError, StateError, OSError) as e:
            say(f"could not stop the VM: {e}; gpu-rent stop does it")
            return 1
        say("the VM is stopped; the volumes stay")
        return 0
    return 1


def _logged(say: Callable[[str], None]):
    """A Rental progress for processes without a terminal: a line when a playbook starts and ends."""

    @contextlib.contextmanager
    def progress(title: str):
        started = time.monotonic()
        say(f"{title}...")
        yield lambda progress: None
        say(f"{title}: done in {time.monotonic() - started:.0f}s")

    return progress
