"""The rental's life: up, stop, destroy, and what status says about it.

Each operation holds the project's lock, records the phase before it acts, and
runs a playbook for every change to the cloud; ids reach the state file the
moment a role records them, so an interrupted run never leaves a resource the
next command cannot name.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from gpu_rent.cloud import view as cloud
from gpu_rent.cloud.connect import CloudUnreachable, connect, scope_of
from gpu_rent.project.errors import ConfigError
from gpu_rent.project.keys import VARS_FILE
from gpu_rent.project.settings import Settings, resource_names
from gpu_rent.project.state import UP_FOUND_FILE, Phase, State, StateStore, load_state
from gpu_rent.rental import set_stats, stop_head_start, stopped_bill, up_head_start, vm_end
from gpu_rent.rental.plan import PlanItem, check_ssh_key, plan, refuse_unsupported, unguarded
from gpu_rent.rental.runner import PlaybookResult, Progress, end_orphans, run_playbook

# Older than this once the confirmation came back (a person answered), up's lookup is asked again.
LOOKUP_FRESH_SECONDS = 2.0


class OperationFailed(Exception):
    """A playbook failed or was canceled; the state keeps the phase to resume from."""

    def __init__(self, message: str, canceled: bool = False):
        super().__init__(message)
        self.canceled = canceled


# ---------------------------------------------------------------------------------------------- operations


class Rental:
    def __init__(
        self, settings: Settings, say: Callable[[str], None], progress: Callable, cancel: threading.Event | None = None
    ):
        self.settings = settings
        self.cancel = cancel  # set from another thread (the watchdog closing) to cancel a running playbook
        self.store = StateStore(settings.project_dir)
        self.say = say
        self.progress = progress  # context manager factory: title -> callback(Progress)
        # called with the resources once the VM's idle-killer has taken its first look (up shows its status)
        self.killer_looked: Callable[[dict], None] | None = None
        self.killer_armed = False  # the last playbook armed the idle-killer (it took its first look)
        self.unguarded: str | None = None  # why the last playbook's VM cannot be deleted by its killer

    def _run(self, state: State, playbook: str, title: str, extravars: dict | None = None) -> PlaybookResult:
        def record(data: dict) -> None:
            self.unguarded = set_stats.unguarded(data) or self.unguarded
            if set_stats.apply(data, state, runtime_dir=self.settings.runtime_dir, playbook=playbook, say=self.say):
                self.killer_armed = True
                if self.killer_looked:  # its status file is there to read
                    self.killer_looked(dict(state.resources))
            try:
                self.store.save(state)
            except OSError as e:
                self.say(f"state: could not save {self.store.path}: {e.strerror}")

        self._end_orphans()
        self.killer_armed = False
        self.unguarded = None
        state.begin_operation(playbook, title)
        self.store.save(state)
        with self.progress(title) as show:
            result = run_playbook(
                playbook,
                project_dir=self.settings.project_dir,
                cloud_auth=self.settings.cloud.ansible_params(),
                extravars=extravars,
                on_progress=show,
                on_stats=record,
                cancel_event=self.cancel,
            )
        state.end_operation()
        self.store.save(state)
        if result.canceled:
            raise OperationFailed(f"{playbook} canceled; the next command resumes from {state.phase}", canceled=True)
        if not result.ok:
            raise OperationFailed(f"{playbook}: {result.failure} (log: {_rel(result.log, self.settings)})")
        return result

    def _end_orphans(self) -> None:
        ended = end_orphans(self.settings.project_dir)
        if ended:
            self.say(f"ended {ended} playbook processes that a killed gpu-rent command had left running")

    def _record_early(self, state: State, early: dict) -> None:
        """The server up's head start asked for (and the address it took), in the state before the playbook
        starts: should the playbook never get as far as recording them, stop and status still name them."""
        if not early.get("created"):
            return
        state.resources["server"] = str(early["server"]["id"])
        address = early.get("floating_ip") or {}
        if address.get("id"):
            state.resources["floating_ip"] = str(address["id"])
            state.resources["floating_ip_address"] = str(address.get("floating_ip_address") or "")
        self.store.save(state)

    def up(self, confirm: Callable[[list[PlanItem]], bool], extra: dict | None = None) -> tuple[State, PlaybookResult]:
        check_ssh_key(self.settings)  # a key the login would refuse is bad input: before anything is rented
        refuse_unsupported(self.settings)
        cidr = self.settings.resolved_operator_cidr()
        with self.store.lock("up"):
            state = load_state(self.store, self.say)
            before = state.resources.get("server")
            conn = connect(self.settings)
            extra = extra or {}
            asked = up_head_start.questions(self.settings, bool(extra.get("gpu_rent_reuse_only")))

            def observed_and_planned() -> tuple[cloud.CloudView, list[PlanItem]]:
                view = cloud.observe(conn, self.settings.name)
                return view, plan(self.settings, view, conn)

            # the playbook's lookup beside the look and the plan: this process has logged in and found the
            # services already, and the warm restart's server is created as soon as both are done
            (view, items), found = cloud.side_by_side(observed_and_planned, lambda: up_head_start.ask(conn, asked))
            looked = time.monotonic()
            # Where this folder's resources are is recorded here, at the login of the one command that makes them,
            # and saved with the phase below, before the head start can make the first: the ids come later, from
            # the head start and from set_stats in ansible's event loop, neither of which logs in. A login
            # elsewhere was refused by connect; a state that predates the record takes it once the cloud here
            # lists one of its ids (else status records it when one is seen).
            if not state.resources or cloud.lists_any(state, view):
                state.cloud = scope_of(conn)
            server = view.server(resource_names(self.settings.name)["server"], state.resources.get("server"))
            address = cloud.our_address(view, server, self.settings.name)
            bill = stopped_bill.for_server(self.settings, view, server, address) if server else None
            if bill:  # preempted with the laptop closed: say what it cost while nobody looked
                then = "deleting it and renting anew on its disks" if server.status == "ERROR" else "bringing it back"
                self.say(f"server {server.name}: {bill}; {then}")
            creates_server = any(i.action == "create" and i.what == "server" for i in items)
            if creates_server and not confirm(items):
                raise OperationFailed("nothing rented: not confirmed", canceled=True)
            if time.monotonic() - looked > LOOKUP_FRESH_SECONDS:  # a person answered: the cloud may have moved
                found = up_head_start.ask(conn, asked)
            self._end_orphans()  # before anything changes the cloud: an orphaned up would rent a second server
            state.move_to(Phase.PROVISIONING, "up")
            self.store.save(state)
            handover = self.settings.runtime_dir / UP_FOUND_FILE
            try:
                found = up_head_start.start(conn, asked, found, handover)  # Nova builds while ansible starts
                self._record_early(state, found["early"])
                handed = {"gpu_rent_operator_cidr": cidr, "gpu_rent_up_found_file": str(handover), **extra}
                result = self._run(state, "up", "renting and bootstrapping", handed)
            except OperationFailed as e:
                name = resource_names(self.settings.name)["server"]
                if self.unguarded:
                    self._unguarded_end(state, name, made=creates_server and not e.canceled)
                warning = unguarded(state, name, created=creates_server, armed=self.killer_armed, before=before)
                if warning:
                    raise OperationFailed(f"{e}; {warning}", canceled=e.canceled) from None
                raise
            finally:
                handover.unlink(missing_ok=True)
            return state, result

    def _unguarded_end(self, state: State, name: str, *, made: bool) -> None:
        """The VM's killer proved it cannot delete the VM (docs/idle-killer.md, "When the proof is refused").
        A server this up made is deleted now, the volumes kept: the cause is the cloud's configuration,
        which no later tick mends, and a closed lid would leave it billing until someone looks. A server
        that was there before (the user's, perhaps working) is kept, and the failure says so in red."""
        cause = self.unguarded
        server = state.resources.get("server")
        if not made or not server:
            raise OperationFailed(
                f"the idle-killer cannot delete server {name}: {cause}; it bills until `gpu-rent stop`"
            )
        try:
            self._run(state, "stop", "deleting the server no idle-killer can delete")
        except OperationFailed as e:
            raise OperationFailed(
                f"the idle-killer cannot delete server {name} ({cause}), and deleting it failed too: {e}; "
                "it bills until `gpu-rent stop`"
            ) from None
        why = f"its idle-killer could not prove it can delete it: {cause}"
        vm_end.write(self.settings.runtime_dir, vm_end.END_FILE, vm_end.stopped(server, time.time(), "up", why))
        state.move_to(Phase.IDLE, "up: no idle-killer can delete the server")
        self.store.save(state)
        raise OperationFailed(
            f"the idle-killer cannot delete server {name}: {cause}. So up deleted it (the volumes stay, nothing "
            "bills but the disks); fix that and run `gpu-rent up` again"
        )

    def stop(self) -> State:
        with self.store.lock("stop"):
            state = load_state(self.store, self.say)
            conn = connect(self.settings)
            recorded = state.resources.get("server")
            name = resource_names(self.settings.name)["server"]
            self._end_orphans()
            if recorded and stop_head_start.ask_for_delete(conn, recorded, name):
                # deleted by this stop, whatever the playbook finds of it (Nova may be done before it looks)
                vm_end.write(self.settings.runtime_dir, vm_end.END_FILE, vm_end.stopped(recorded, time.time()))
            self._run(state, "stop", "stopping")
            if recorded:  # deleted by this stop (its playbook recorded that), or gone before: whose doing
                vm_end.settle(self.settings.runtime_dir, conn, recorded)
            state.move_to(Phase.IDLE, "stop")
            self.store.save(state)
            return state

    def _require_running_vm(self, what: str, hint: str) -> None:
        """Commands that act on the VM refuse, as bad input, when no server of this project is ACTIVE."""
        conn = connect(self.settings)
        server = cloud.observe(conn, self.settings.name).server(resource_names(self.settings.name)["server"])
        if server is None or server.status != "ACTIVE":
            found = server.status if server else "no server"
            raise ConfigError("arguments", f"no running VM to {what} ({found}): {hint}")

    def seed(self, part: str, update: bool = False) -> State:
        """Re-run one part of seeding (extensions, autocomplete, models) on the running VM."""
        with self.store.lock(f"seed-{part}"):
            state = load_state(self.store, self.say)
            self._require_running_vm("seed", "run gpu-rent up first")
            self._run(state, "seed", f"seeding {part}", {"seed_only": part, "seed_update": update})
            return state

    def seed_llm(self) -> State:
        """The LLM runtime and the models of ollama-models.yaml on the running VM (what up does with it on)."""
        if self.settings.llm_runtime == "none":
            raise ConfigError(
                VARS_FILE,
                "LLM_RUNTIME=none: no LLM runtime to install; set LLM_RUNTIME=ollama or llamacpp",
                key="LLM_RUNTIME",
            )
        with self.store.lock("seed-llm"):
            state = load_state(self.store, self.say)
            self._require_running_vm("seed the LLM runtime on", "run gpu-rent up first")
            self._run(state, "seed_llm", "the LLM runtime and its models")
            return state

    def hold(self, until: float | None) -> State:
        """Write (or clear, for None) the hold the VM's idle-killer honours."""
        with self.store.lock("hold"):
            state = load_state(self.store, self.say)
            self._require_running_vm("hold", "nothing bills; gpu-rent up")
            # a length, not this machine's time: the VM makes it a time by its own clock (playbooks/hold.yml)
            length = None if until is None else str(max(int(until - time.time()), 1))
            extra = {"gpu_rent_hold_seconds": length} if length else {"gpu_rent_hold_until": "clear"}
            self._run(state, "hold", "holding" if until else "clearing the hold", extra)
            return state

    def resize_data(self, gb: int) -> tuple[State, int]:
        """Grow the data volume to `gb` GiB and, on a running VM, its filesystem; returns the size before."""
        with self.store.lock("resize-data"):
            state = load_state(self.store, self.say)
            conn = connect(self.settings)
            name = resource_names(self.settings.name)["data_volume"]
            volume = cloud.observe(conn, self.settings.name).volume(name)
            if volume is None:
                raise ConfigError("--gb", f"there is no data volume {name} yet: gpu-rent up makes it")
            if gb < volume.size:
                raise ConfigError(
                    "--gb", f"{gb} GB is smaller than the data volume ({volume.size} GB): volumes only grow"
                )
            if gb > volume.size:
                self._run(state, "resize_data", "growing the data volume", {"gpu_rent_grow_data_gb": gb})
            return state, volume.size

    def destroy(self) -> State:
        with self.store.lock("destroy"):
            state = load_state(self.store, self.say)
            connect(self.settings)
            self._run(state, "destroy", "destroying", {"gpu_rent_i_understand_data_loss": True})
            state.move_to(Phase.IDLE, "destroy")
            state.resources.clear()
            self.store.save(state)
            return state


def _rel(path: Path | None, settings: Settings) -> str:
    if path is None:
        return "-"
    try:
        return str(path.relative_to(settings.project_dir))
    except ValueError:
        return str(path)


__all__ = ["CloudUnreachable", "OperationFailed", "PlanItem", "Progress", "Rental", "plan"]
