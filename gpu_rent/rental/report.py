"""status and doctor: what the cloud says, in words, never changing the cloud."""

from __future__ import annotations

import contextlib
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from rich.console import Console
from rich.markup import escape

from gpu_rent.cloud import killer_proof
from gpu_rent.cloud import plain_http as cloud_http
from gpu_rent.cloud import route as cloud_route
from gpu_rent.cloud import view as cloud
from gpu_rent.cloud.connect import CloudUnreachable, ScopeElsewhere, connect, login, refuse_elsewhere, scope_of
from gpu_rent.project import swarmui_versions
from gpu_rent.project.errors import ConfigError
from gpu_rent.project.settings import Settings, resource_names
from gpu_rent.project.state import Phase, Scope, StateLocked, StateStore, load_state
from gpu_rent.rental import stopped_bill, vm_end
from gpu_rent.rental.plan import check_ssh_key
from gpu_rent.to_vm import killer_view, tunnel_record


@dataclass
class StatusReport:
    project: str
    cloud: str
    phase: Phase
    phase_note: str
    server: cloud.Server | None
    address: str | None
    volumes: list[cloud.Volume]
    leftovers: list[cloud.Leftover]
    minutes_alive: float | None
    cost_so_far: float | None
    price_per_hour: float | None
    resources: dict = field(default_factory=dict)
    snapshot: str | None = None  # the boot snapshot's name when the cloud has it (billable storage)
    gpu: str | None = None  # what the last bootstrap found on the VM, in words
    killer: str | None = None  # the idle-killer's view, in one line (None: no running VM to ask)
    killer_status: dict | None = None  # its status file as the VM has it
    tunnel: dict | None = None  # the record of this project's running tunnel process, if one runs
    last_end: dict | None = None  # how the last VM ended (vm_end), shown while there is none
    stopped_bill: str | None = None  # what still bills while the server stands stopped (a preemption)
    # the long operation the state records ({"command", "step", "pid", "started_at"}), and whether the command
    # that began it still runs (it holds the project's lock); one that does not was killed or crashed mid-way
    operation: dict | None = None
    operation_running: bool = False

    def to_json(self) -> dict:
        s = self.server
        return {
            "project": self.project,
            "cloud": self.cloud,
            "phase": str(self.phase),
            "phase_note": self.phase_note,
            "server": None
            if s is None
            else {"id": s.id, "name": s.name, "status": s.status, "flavor": s.flavor, "tags": list(s.tags)},
            "floating_ip": self.address,
            "volumes": [
                {"id": v.id, "name": v.name, "status": v.status, "size_gb": v.size, "pool": v.availability_zone}
                for v in self.volumes
            ],
            "minutes_alive": None if self.minutes_alive is None else round(self.minutes_alive, 1),
            "cost_so_far": None if self.cost_so_far is None else round(self.cost_so_far, 2),
            "leftovers": [
                {"kind": x.kind, "id": x.id, "detail": x.detail, "delete_command": x.delete_command, "end": x.end}
                for x in self.leftovers
            ],
            "snapshot": self.snapshot,
            "gpu": self.gpu,
            "idle_killer": None
            if self.killer is None
            else {"view": self.killer, "status": self.killer_status, "unguarded": killer_view.unguarded(self.killer)},
            "resources": self.resources,
            "tunnel": self.tunnel,
            "stopped_bill": self.stopped_bill,
            "last_end": None if self.last_end is None else {**self.last_end, "line": vm_end.line(self.last_end)},
            "operation": None if self.operation is None else {**self.operation, "running": self.operation_running},
        }

    def render(self, out: Console) -> None:
        out.print(f"[bold]project[/]   {escape(self.project)}  [dim]{escape(self.cloud)}[/]")
        out.print(f"[bold]phase[/]     {self.phase}  [dim]({escape(self.phase_note)})[/]")
        s = self.server
        if s is None:
            out.print("[bold]server[/]    none [dim](nothing is billing for compute)[/]")
            if self.last_end is not None:
                out.print(f"[bold]ended[/]     {escape(vm_end.line(self.last_end))}")
        else:
            alive = f", alive {self.minutes_alive:.0f} min" if self.minutes_alive is not None else ""
            cost = ""
            if self.cost_so_far is not None:
                cost = f", cost so far ~{self.cost_so_far:.2f} ({self.price_per_hour:g}/hour, billed by the hour)"
            out.print(f"[bold]server[/]    {escape(s.name)} {s.status} {escape(s.flavor or '')}{alive}{cost}")
            if s.fault:
                out.print(f"[red]          fault: {escape(s.fault)}[/]")
            if self.stopped_bill:
                out.print(f"[bold yellow]billing[/]   [bold]{escape(self.stopped_bill)}[/]")
                out.print(f"          {FAILED_ADVICE if s.status == 'ERROR' else STOPPED_ADVICE}")
        if self.address:
            out.print(f"[bold]address[/]   {self.address}")
        for v in self.volumes:
            out.print(f"[bold]volume[/]    {escape(v.name)} {v.size} GB {v.status} in {v.availability_zone}")
        if self.snapshot:
            out.print(f"[bold]snapshot[/]  {escape(self.snapshot)} [dim](of a boot volume that reached ready)[/]")
        if self.gpu and s is not None:
            out.print(f"[bold]gpu[/]       {escape(self.gpu)}")
        if self.killer is not None:
            blind = killer_view.unguarded(self.killer)
            out.print(f"[bold]killer[/]    [{'bold red' if blind else 'bold'}]{escape(self.killer)}[/]")
            if blind:
                out.print("          [bold red]nothing on the VM is known to delete it[/]: it bills until "
                          "[bold]gpu-rent stop[/] (the disks stay)")  # fmt: skip
        t = self.tunnel
        if t is not None:
            detail = f"pid {t.get('pid')}, {t.get('forwarded', 0)} connections"
            more = f": {t.get('message')}" if t.get("state") != "forwarding" and t.get("message") else ""
            out.print(f"[bold]tunnel[/]    {t.get('url')} {t.get('state')}{escape(more)} [dim]({detail})[/]")
            if t.get("llm_url"):
                out.print(f"[bold]llm[/]       {t.get('llm_url')} [dim](the LLM runtime, through the same tunnel)[/]")
        elif s is not None and s.status == "ACTIVE":
            out.print("[bold]tunnel[/]    none [dim](gpu-rent tunnel, or gpu-rent open)[/]")
        line = operation_line(self.operation, self.operation_running)
        if line:
            label = "[bold]running[/]  " if self.operation_running else "[bold yellow]unfinished[/]"
            out.print(f"{label} {escape(line)}")
        if not self.leftovers:
            out.print("[bold]leftovers[/] none")
        for x in self.leftovers:
            out.print(f"[bold yellow]leftover[/]  {x.kind} {escape(x.detail)}")
            if x.delete_command:
                out.print(f"          delete: [bold]{escape(x.delete_command)}[/]")
            else:
                out.print(f"          ends with {escape(x.end)}")


def operation_line(operation: dict | None, running: bool) -> str | None:
    """The recorded long operation in words (SPEC §11): what runs now, or what a killed command left half done."""
    if not isinstance(operation, dict) or not operation.get("command"):
        return None
    try:
        begun = datetime.fromisoformat(str(operation.get("started_at")).replace("Z", "+00:00"))
        since = f", begun {begun.astimezone():%H:%M}"
    except ValueError:
        since = ""
    what = f"{operation['command']} ({operation.get('step') or 'no step recorded'}{since})"
    if running:
        return f"{what}, pid {operation['pid']}" if operation.get("pid") else what
    return f"{what} ended before it finished (killed or crashed): run the same command again, it resumes"


STOPPED_ADVICE = "`gpu-rent stop` ends all but the disks (they stay until destroy); `gpu-rent up` brings the VM back"
# roles/server deletes a server in ERROR (its volumes kept) so that up rents anew
FAILED_ADVICE = "`gpu-rent stop` deletes it, its disks kept; `gpu-rent up` deletes it and rents a new one on them"


def status_report(settings: Settings, say: Callable[[str], None]) -> StatusReport:
    store = StateStore(settings.project_dir)
    state = load_state(store, say)
    # the killer's word travels over SSH while the cloud is read: used only if the cloud confirms the address
    early = _killer_read(settings, state.resources.get("floating_ip_address"), state.resources.get("boot_volume"))
    try:
        return _status_report(settings, say, store, state, early)
    finally:
        killer_view.abandon(early[1] if early else None)


def _killer_read(settings: Settings, address: str | None, boot_volume: str | None):
    if not address or not boot_volume:
        return None
    return (address, boot_volume), killer_view.start_for(settings, address, boot_volume)


def _status_report(settings: Settings, say: Callable[[str], None], store: StateStore, state, early) -> StatusReport:
    conn, view, where, scope = _look(settings)
    # a login elsewhere sees none of the state's resources: no word on them, and nothing forgotten
    refuse_elsewhere(state, scope, settings.cloud)
    names = resource_names(settings.name)
    # status writes only what the cloud proves, and only when no other command is running
    tunnel = tunnel_record.read_record(settings)
    running = True  # the lock is another command's until status gets it
    with contextlib.suppress(StateLocked), store.lock("status", wait=0):
        running = False
        state = load_state(store, say)
        refuse_elsewhere(state, scope, settings.cloud)  # as another command may have recorded it since
        phase, why = _with_tunnel(*cloud.reconcile(state, view, settings.name), tunnel)
        server = view.server(names["server"], state.resources.get("server"))
        stale = cloud.stale_ids(state, view)
        if "server" in stale:  # gone, and not by gpu-rent stop (which forgets it): tell how, once
            vm_end.settle(settings.runtime_dir, conn or connect(settings), state.resources["server"])
        for key in (k for k in stale if k in cloud.VOLUME_KEYS):  # said once: the state forgets it below
            anew = ("an empty one; what it held (models, outputs) is not on it" if key == "data_volume"
                    else "a new one from the image (SwarmUI is installed again)")  # fmt: skip
            say(f"the {key.replace('_', ' ')} {state.resources[key]} is gone from the cloud (deleted outside "
                f"gpu-rent): the next up makes {anew}")  # fmt: skip
        if phase != state.phase or stale or (server and state.resources.get("server") != server.id):
            state.move_to(phase, f"reconciled by status: {why}")
            for key in stale:
                state.resources.pop(key, None)
            if server is not None:
                state.resources["server"] = server.id
            store.save(state)
        proven = cloud.proven_resources(state, view, settings.name)
        if proven:  # a state file lost or moved aside as corrupt: what the cloud proves is ours comes back
            state.resources.update(proven)
        # where the resources are, for a state that does not say (rebuilt, or written before gpu-rent kept it):
        # once the cloud here lists one of them, this login's project and region are theirs
        unscoped = state.cloud is None and cloud.lists_any(state, view)
        if unscoped:
            state.cloud = scope
        if proven or unscoped:
            store.save(state)
    phase, why = _with_tunnel(*cloud.reconcile(state, view, settings.name), tunnel)
    server = view.server(names["server"], state.resources.get("server"))
    if cloud.missing_preemptible(server):
        say(f"server {server.name} has no 'preemptible' tag: it bills at the full price; `gpu-rent up` restores it")
    minutes = cloud.alive_minutes(server) if server else None
    cost = None
    if minutes is not None and settings.price_per_hour is not None:
        cost = settings.price_per_hour * (int(minutes // 60) + 1)  # hourly billing: a started hour counts
    address = cloud.our_address(view, server, settings.name)
    killer_status = killer = None
    boot_volume = state.resources.get("boot_volume")
    if server is not None and server.status == "ACTIVE" and address and boot_volume:
        if early is None or early[0] != (address, boot_volume):  # the cloud says otherwise: ask there instead
            killer_view.abandon(early[1] if early else None)
            early = _killer_read(settings, address, boot_volume)
        killer_status = killer_view.finish(early[1])
        killer = killer_view.describe(killer_status, time.time(), server.id)
        if killer_status and killer_status.get("server_id") == server.id:  # what judges the end, if it comes
            vm_end.write(settings.runtime_dir, vm_end.SEEN_FILE, killer_status)
    elif server is not None and server.status == "ACTIVE":  # a running server with no killer to ask: said too
        killer = killer_view.describe(None, time.time(), server.id)
    return StatusReport(
        operation=state.operation,
        operation_running=running,
        project=str(settings.project_dir),
        cloud=where,
        phase=phase,
        phase_note=why,
        server=server,
        address=address,
        volumes=[v for v in view.volumes],
        leftovers=cloud.leftovers(state, view, settings.name, openstack_cli(settings)),
        minutes_alive=minutes,
        cost_so_far=cost,
        price_per_hour=settings.price_per_hour,
        resources=dict(state.resources),
        snapshot=names["snapshot"] if view.snapshots else None,
        gpu=state.gpu,
        killer=killer,
        killer_status=killer_status,
        tunnel=tunnel,
        last_end=None if server else vm_end.read(settings.runtime_dir, vm_end.END_FILE),
        stopped_bill=stopped_bill.for_server(settings, view, server, address) if server else None,
    )


def _look(settings: Settings) -> tuple[object | None, cloud.CloudView, str, Scope]:
    """(openstacksdk's connection if it was needed, the view, the cloud's description, where the login landed).
    Over plain HTTP along the route a status kept (no SDK loaded: most of status's time), else through the SDK,
    which keeps the route."""
    route = cloud_route.load(settings.cloud, settings.runtime_dir)
    view = cloud_http.observe(route, settings.name) if route is not None else None
    if view is not None:
        return None, view, route.cloud, route.scope
    conn = connect(settings)
    view = cloud.observe(conn, settings.name)
    where = settings.cloud.describe()
    cloud_route.keep(conn, settings.cloud, where, settings.runtime_dir)
    return conn, view, where, scope_of(conn)


def _with_tunnel(phase: Phase, why: str, tunnel: dict | None) -> tuple[Phase, str]:
    """ready_tunneled needs a live tunnel process of this project; a live one makes ready_cloud tunneled."""
    forwarding = tunnel is not None and tunnel.get("state") == "forwarding"
    if phase is Phase.READY_TUNNELED and tunnel is None:
        return Phase.READY_CLOUD, f"{why}; no tunnel process runs"
    if phase is Phase.READY_CLOUD and forwarding:
        return Phase.READY_TUNNELED, f"{why}; the tunnel forwards"
    return phase, why


def openstack_cli(settings: Settings) -> str:
    """The `openstack` command line that reaches the project's cloud, for copy and paste."""
    auth = settings.cloud
    if not auth.cloud:
        return "openstack"  # OS_* auth: the user's shell (openrc) has it
    prefix = f"OS_CLIENT_CONFIG_FILE={shlex.quote(str(auth.config_file))} " if auth.config_file else ""
    return f"{prefix}openstack --os-cloud {shlex.quote(auth.cloud)}"


# ---------------------------------------------------------------------------------------------- doctor


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def state_cloud_check(settings: Settings, login: Scope) -> Check:
    """Whether the login lands where the state's resources are: the refusal every other command would give."""
    recorded = StateStore(settings.project_dir).peek()
    try:
        refuse_elsewhere(recorded, login, settings.cloud)
    except ScopeElsewhere as e:
        return Check("state's cloud", False, str(e))
    if recorded is None or not recorded.resources or recorded.cloud is None:
        return Check("state's cloud", True, "no resources recorded in a project and region yet")
    return Check("state's cloud", True, f"its resources are in {recorded.cloud}, where this login is")


def doctor_checks(settings: Settings) -> list[Check]:
    checks: list[Check] = []
    why = swarmui_versions.refusal(settings.swarmui_version)
    shown = swarmui_versions.PINNED_LABEL if settings.swarmui_version == swarmui_versions.PINNED else None
    checks.append(Check("swarmui version", why is None, why or shown or settings.swarmui_version))
    try:
        check_ssh_key(settings)
        checks.append(Check("ssh key", True, str(settings.ssh_key)))
    except ConfigError as e:
        checks.append(Check("ssh key", False, str(e)))
    checks.append(Check("login values", True, settings.cloud.origins()))
    try:
        conn = login(settings.cloud)  # a fresh login, not the kept token: doctor proves the credentials
        checks.append(Check("auth", True, settings.cloud.describe()))
    except CloudUnreachable as e:
        checks.append(Check("auth", False, f"{settings.cloud.describe()}: {e.kind}: {e.said[:200]}"))
        return checks
    checks.append(state_cloud_check(settings, scope_of(conn)))
    catalog = {entry["type"] for entry in conn.service_catalog}
    for stype in ("compute", "network", "image"):
        checks.append(Check(f"catalog: {stype}", stype in catalog, "from Keystone" if stype in catalog else "missing"))
    storage = catalog & {"block-storage", "volumev3", "volume"}
    checks.append(Check("catalog: block storage", bool(storage), ", ".join(sorted(storage)) or "missing"))
    zones = {z.name for z in conn.compute.availability_zones()}
    for pool in settings.pools():
        checks.append(Check(f"pool {pool}", pool in zones, "available" if pool in zones else f"not in {sorted(zones)}"))
    for name in settings.flavors():
        flavor = conn.compute.find_flavor(name, ignore_missing=True)
        detail = f"{flavor.vcpus} vCPU, {flavor.ram // 1024} GB RAM" if flavor else "not found"
        checks.append(Check(f"flavor {name}", flavor is not None, detail))
    image = conn.image.find_image(settings.image, ignore_missing=True)
    checks.append(Check("image", image is not None, f"{settings.image}" + ("" if image else " not found")))
    externals = [n.name for n in conn.network.networks(is_router_external=True)]
    if settings.external_network:
        ok = settings.external_network in externals
        checks.append(Check("external network", ok, settings.external_network + ("" if ok else " not found")))
    else:
        ok = len(externals) == 1
        checks.append(Check("external network", ok, ", ".join(externals) or "none; set EXTERNAL_NETWORK"))
    # the idle-killer's DELETE rests on Nova matching an access rule at the path its calls use: proven here
    region = settings.cloud.ansible_params()
    ok, detail = killer_proof.probe(conn, region["auth"].get("auth_url", ""), region.get("interface"),
                                    region.get("region_name"))  # fmt: skip
    checks.append(Check("idle-killer credential", ok, detail))
    limits = conn.compute.get_limits().absolute
    room = (limits.instances or 0) - (limits.instances_used or 0)
    checks.append(Check("quota: servers", room >= 1, f"{room} more allowed"))
    return checks
