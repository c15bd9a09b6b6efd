"""What the cloud really has, and what the state should say about it.

Read-only: status, reconcile and doctor look at the cloud through openstacksdk
(status, most often, over plain HTTP: cloud_http.py, with the same JSON-to-view
functions here); playbooks change it (up_head_start.py and stop_head_start.py
start their work). `observe` gathers one snapshot; `reconcile` and `leftovers`
are pure functions of (state, snapshot) so they are unit-tested without a cloud.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpu_rent.project.settings import resource_names as names
from gpu_rent.project.state import Phase, State

TAG = "gpu-rent"
PREEMPTIBLE = "preemptible"


@dataclass(frozen=True)
class Server:
    id: str
    name: str
    status: str
    vm_state: str | None
    tags: tuple[str, ...]
    flavor: str | None
    created: str | None
    addresses: tuple[str, ...]  # floating addresses
    fault: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    updated: str | None = None  # Nova's last change of the server: when a preemption stopped it


@dataclass(frozen=True)
class Volume:
    id: str
    name: str
    status: str
    size: int
    availability_zone: str | None
    gpu_rent: str | None = None  # the volume's gpu-rent metadata: boot or data


@dataclass(frozen=True)
class FloatingIP:
    id: str
    address: str
    port_id: str | None
    description: str
    fixed_address: str | None


@dataclass(frozen=True)
class CloudView:
    """One look at the project: its tagged servers, our volumes, its floating IPs."""

    servers: tuple[Server, ...] = ()
    volumes: tuple[Volume, ...] = ()
    floating_ips: tuple[FloatingIP, ...] = ()
    snapshots: tuple[str, ...] = ()
    taken_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def server(self, name: str, recorded: str | None = None) -> Server | None:
        """Our server: the recorded id if the cloud has it, else the first with our name."""
        return next((s for s in self.servers if s.id == recorded), None) or next(
            (s for s in self.servers if s.name == name), None
        )

    def volume(self, name: str) -> Volume | None:
        return next((v for v in self.volumes if v.name == name), None)


@dataclass(frozen=True)
class Leftover:
    """Something billable that no state owns, with the command that deletes it; or, where that command would
    delete someone's data or another project's rental, none and how its own project folder ends it."""

    kind: str
    id: str
    detail: str
    delete_command: str | None
    end: str = ""  # how it ends, where no delete command is given


def observe(conn, prefix: str) -> CloudView:
    """One read of the project: servers tagged gpu-rent or named ours (a lost tag must not hide one),
    volumes with our names or gpu-rent metadata, every floating IP, our boot snapshot.

    The four lists go out side by side: status is read often, and on a real cloud each call costs far
    more than on loopback."""
    wanted = names(prefix)
    servers, volumes, ips, snapshots = side_by_side(
        lambda: _servers(conn, wanted),
        lambda: _volumes(conn, wanted),
        lambda: _floating_ips(conn),
        lambda: _snapshots(conn, wanted),
    )
    return CloudView(servers, volumes, ips, snapshots)


def observe_servers(conn, prefix: str) -> CloudView:
    """observe's servers alone: stop's pull asks only whether the server runs (one call, not four)."""
    return CloudView(servers=_servers(conn, names(prefix)))


def side_by_side(*calls: Callable[[], object]) -> list:
    """Each call's result, the calls run at once; the first error is raised. Daemon threads: Ctrl+C ends
    the command at once even when the network hangs (a pool's threads would be waited for at exit)."""
    results: list = [None] * len(calls)
    errors: list[BaseException | None] = [None] * len(calls)

    def run(i: int, call: Callable[[], object]) -> None:
        try:
            results[i] = call()
        except BaseException as e:  # handed to the caller's thread, raised there
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i, c), daemon=True, name="observe") for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results


def _servers(conn, wanted: dict) -> tuple[Server, ...]:
    return servers_of((_as_api(s, _SDK_SERVER) for s in conn.compute.servers(details=True)), wanted)


def _volumes(conn, wanted: dict) -> tuple[Volume, ...]:
    return volumes_of((_as_api(v, _SDK_VOLUME) for v in conn.block_storage.volumes(details=True)), wanted)


def _floating_ips(conn) -> tuple[FloatingIP, ...]:
    return floating_ips_of(_as_api(ip, _SDK_FLOATING_IP) for ip in conn.network.ips())


def _snapshots(conn, wanted: dict) -> tuple[str, ...]:
    return snapshots_of((_as_api(s, _SDK_SNAPSHOT) for s in conn.block_storage.snapshots(details=False)), wanted)


# The API's name of each field the view reads -> openstacksdk's attribute for it. The views are built from the
# API's JSON by one set of functions: status's plain HTTP read (cloud_http.py) hands them the JSON as it came.
_SDK_SERVER = {
    **{name: name for name in ("id", "name", "status", "tags", "flavor", "addresses", "fault", "metadata")},
    "OS-EXT-STS:vm_state": "vm_state",
    "created": "created_at",
    "updated": "updated_at",
}
_SDK_VOLUME = {name: name for name in ("id", "name", "status", "size", "availability_zone", "metadata")}
_SDK_FLOATING_IP = {name: name for name in ("id", "floating_ip_address", "port_id", "description", "fixed_ip_address")}
_SDK_SNAPSHOT = {name: name for name in ("id", "name")}


def _as_api(resource, names: dict[str, str]) -> dict:
    return {api: getattr(resource, attribute) for api, attribute in names.items()}


def servers_of(bodies: Iterable[Mapping], wanted: dict) -> tuple[Server, ...]:
    """Our servers among Nova's (each as GET /servers/detail gives it): tagged gpu-rent or named ours."""
    servers = []
    for s in bodies:
        if s["status"] == "DELETED":  # listed for a moment after the delete finished
            continue
        tags = tuple(s.get("tags") or ())
        if TAG not in tags and s["name"] != wanted["server"]:
            continue
        floating = tuple(
            a["addr"]
            for net in (s.get("addresses") or {}).values()
            for a in net
            if a.get("OS-EXT-IPS:type") == "floating"
        )
        fault = (s.get("fault") or {}).get("message") if s.get("fault") else None
        flavor = (s.get("flavor") or {}).get("original_name") or (s.get("flavor") or {}).get("name")
        metadata = tuple(sorted((s.get("metadata") or {}).items()))
        state = (s["status"], s.get("OS-EXT-STS:vm_state"), tags, flavor, s.get("created"), floating, fault, metadata)
        servers.append(Server(s["id"], s["name"], *state, s.get("updated")))
    return tuple(servers)


def volumes_of(bodies: Iterable[Mapping], wanted: dict) -> tuple[Volume, ...]:
    """Our volumes among Cinder's: named ours, or with gpu-rent metadata (another NAME's, a leftover)."""
    return tuple(
        Volume(
            v["id"], v["name"], v["status"], v["size"], v.get("availability_zone"), (v.get("metadata") or {}).get(TAG)
        )
        for v in bodies
        if v["name"] in (wanted["boot_volume"], wanted["data_volume"]) or TAG in (v.get("metadata") or {})
    )


def floating_ips_of(bodies: Iterable[Mapping]) -> tuple[FloatingIP, ...]:
    return tuple(
        FloatingIP(
            ip["id"],
            ip["floating_ip_address"],
            ip.get("port_id"),
            ip.get("description") or "",
            ip.get("fixed_ip_address"),
        )
        for ip in bodies
    )


def snapshots_of(bodies: Iterable[Mapping], wanted: dict) -> tuple[str, ...]:
    return tuple(s["id"] for s in bodies if s["name"] == wanted["snapshot"])


def reconcile(state: State, view: CloudView, prefix: str) -> tuple[Phase, str]:
    """The phase the cloud supports, and why, without touching the cloud.

    A gpu-rent server alive with no local process is normal (ready_cloud or
    whatever the state says); a state that thinks a server runs when the cloud
    has none goes back to idle (the idle-killer, a direct stop, or preemption).
    """
    server = view.server(names(prefix)["server"], state.resources.get("server"))
    if server is None:
        if state.phase is Phase.IDLE:
            return Phase.IDLE, "no server"
        return Phase.IDLE, "the server is gone (stopped elsewhere or deleted by the idle-killer)"
    if state.phase is Phase.IDLE:
        # a server the state does not know: a direct `ansible-playbook up.yml`, or a lost state file
        return Phase.PROVISIONING, f"server {server.id} exists but the state said idle"
    return state.phase, f"server {server.status.lower()}"


def proven_resources(state: State, view: CloudView, prefix: str) -> dict[str, str]:
    """What the state lacks and the cloud proves is this project's: its volumes by name, the server of its
    name and the floating IP attached to it. A lost or corrupt state file is rebuilt from these (SPEC §4),
    so stop can still pull Output and status can read the VM's killer; a detached address stays a leftover."""
    ours = names(prefix)
    found: dict[str, str] = {}
    for key in ("boot_volume", "data_volume"):
        volume = view.volume(ours[key])
        if volume is not None:
            found[key] = volume.id
    server = view.server(ours["server"], state.resources.get("server"))
    if server is not None:
        found["server"] = server.id
        ip = next((ip for ip in view.floating_ips if ip.port_id and ip.address in server.addresses), None)
        if ip is not None:
            found |= {"floating_ip": ip.id, "floating_ip_address": ip.address}
    return {key: value for key, value in found.items() if not state.resources.get(key)}


VOLUME_KEYS = ("boot_volume", "data_volume")


def stale_ids(state: State, view: CloudView) -> list[str]:
    """State entries for a server, floating IP or volume the cloud no longer has (stopped, killed or deleted
    elsewhere)."""
    stale = []
    if state.resources.get("server") and state.resources["server"] not in {s.id for s in view.servers}:
        stale.append("server")
    if state.resources.get("floating_ip") and state.resources["floating_ip"] not in {i.id for i in view.floating_ips}:
        stale += ["floating_ip", "floating_ip_address"]
    # a volume deleted outside gpu-rent (the panel, another tool): the next up makes an empty one by its name
    stale += [key for key in VOLUME_KEYS if state.resources.get(key) not in (None, *(v.id for v in view.volumes))]
    return stale


def lists_any(state: State, view: CloudView) -> bool:
    """The cloud lists a server, volume or floating IP the state names: its resources are where this look is."""
    listed = {s.id for s in view.servers} | {v.id for v in view.volumes} | {ip.id for ip in view.floating_ips}
    return not listed.isdisjoint(state.resources.values())


def leftovers(state: State, view: CloudView, prefix: str, cli: str = "openstack") -> list[Leftover]:
    """Every billable thing not in use by this project's rental, each with its delete command; none for a
    volume or another NAME's server."""
    ours = names(prefix)
    mine = view.server(ours["server"], state.resources.get("server"))
    found = []
    for s in view.servers:
        if mine is not None and s.id == mine.id:
            continue
        # gpu-rent names a server after its NAME and marks it with it: one without the mark (tagged by hand, or
        # made before the mark) is taken for the NAME its name says
        marked = dict(s.metadata).get(TAG)
        owner = marked or s.name
        shown = f"{s.name} ({s.status}, tags {','.join(s.tags)})"
        if owner != prefix:  # another folder's rental, maybe at work: its own stop pulls its Output first
            by = "" if marked else " (by its name)"
            detail = f"{shown}: belongs to gpu-rent project NAME={owner}{by}"
            found.append(
                Leftover("server", s.id, detail, None, f"`gpu-rent stop` in the project folder of NAME={owner}")
            )
            continue
        why = "a second server with this project's name" if s.name == ours["server"] else "marked with this NAME"
        found.append(Leftover("server", s.id, f"{shown}: {why}", f"{cli} server delete {s.id}"))
    for v in view.volumes:
        if v.name in (ours["boot_volume"], ours["data_volume"]):
            continue  # ours, kept on purpose between rentals (destroy removes them)
        found.append(
            Leftover(
                "volume",
                v.id,
                f"{v.name} ({v.size} GB {v.status}): a gpu-rent {v.gpu_rent or ''} volume of another NAME",
                None,  # it holds data (another folder's, or this one's before a rename): never a delete command here
                "it holds data: `gpu-rent destroy --i-understand-data-loss` in the project folder whose NAME made it",
            )
        )
    for ip in view.floating_ips:
        if ip.port_id:
            continue  # attached: billed with its server, which is named above or is in use
        if ip.description == ours["floating_ip_description"]:
            why = (
                "this project's floating IP, unattached (KEEP_FLOATING_IP, or its server went): the next up reuses it"
                if ip.id == state.resources.get("floating_ip")
                else "gpu-rent's floating IP, left after its server went"
            )
        else:
            why = "unattached floating IP"
        found.append(Leftover("floating_ip", ip.id, f"{ip.address}: {why}", f"{cli} floating ip delete {ip.id}"))
    return found


def missing_preemptible(server: Server | None) -> bool:
    """Without the tag, Selectel bills the server at the full price."""
    return server is not None and PREEMPTIBLE not in server.tags


def our_address(view: CloudView, server: Server | None, prefix: str) -> str | None:
    """The server's floating address, else the project's own floating IP (kept, or not yet attached)."""
    if server and server.addresses:
        return server.addresses[0]
    description = names(prefix)["floating_ip_description"]
    return next((ip.address for ip in view.floating_ips if ip.description == description), None)


def unix_time(iso: str | None) -> float | None:
    """A Nova time ("2026-12-02T08:40:56Z") as a unix time; None when absent or unreadable."""
    if not iso:
        return None
    try:
        parsed = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def alive_minutes(server: Server, now: datetime | None = None) -> float | None:
    if not server.created:
        return None
    created = datetime.fromisoformat(server.created.replace("Z", "+00:00"))
    return ((now or datetime.now(UTC)) - created).total_seconds() / 60
