"""What `up` would create or reuse, and what it refuses before anything is rented: one answer for dry-run and up."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_rent.cloud import view as cloud
from gpu_rent.project import swarmui_versions
from gpu_rent.project.env import ENV_FILE
from gpu_rent.project.errors import ConfigError
from gpu_rent.project.keys import VARS_FILE
from gpu_rent.project.settings import Settings, resource_names
from gpu_rent.project.state import State


@dataclass(frozen=True)
class PlanItem:
    what: str
    name: str
    action: str  # "create" or "reuse"
    detail: str = ""


def check_ssh_key(settings: Settings) -> None:
    """The SSH key the VM's login will take, refused as bad input before anything is rented (ssh.check_login_key)."""
    public = settings.ssh_public_key()
    from gpu_rent.to_vm import ssh

    try:
        ssh.check_login_key(settings.ssh_key, public)
    except ssh.SshError as e:
        raise ConfigError(ENV_FILE, str(e), key="GPU_RENT_SSH_KEY") from None


def refuse_unsupported(settings: Settings) -> None:
    """A SwarmUI version known to lack what the idle-killer needs is bad input, refused before the cloud is asked."""
    why = swarmui_versions.refusal(settings.swarmui_version)
    if why:
        raise ConfigError(VARS_FILE, why, key="SWARMUI_VERSION")


def preflight(settings: Settings, view: cloud.CloudView, conn) -> None:
    """Names in gpu-rent.vars that the cloud does not have: bad input, refused before anything is created."""
    refuse_unsupported(settings)
    names = resource_names(settings.name)
    image_asked = view.volume(names["boot_volume"]) is None  # a boot volume made from it already: not needed
    # asked side by side (each flavor is two calls, a miss then a list): refused in the order they are written
    flavors, image, zones = cloud.side_by_side(
        lambda: [conn.compute.find_flavor(name, ignore_missing=True) for name in settings.flavors()],
        lambda: conn.image.find_image(settings.image, ignore_missing=True) if image_asked else True,
        lambda: {z.name for z in conn.compute.availability_zones()},
    )
    for name, flavor in zip(settings.flavors(), flavors, strict=True):
        if flavor is None:
            key = "FLAVOR" if name == settings.flavor else "FLAVOR_FALLBACK"
            raise ConfigError(VARS_FILE, f"{key}: flavor {name} does not exist in this cloud", key=key)
    if image is None:
        raise ConfigError(VARS_FILE, f"IMAGE={settings.image}: no such image in this cloud", key="IMAGE")
    for pool in settings.pools():
        if pool not in zones:
            key = "POOL" if pool == settings.pool else "POOL_FALLBACK"
            what = f"POOL={pool}" if key == "POOL" else f"POOL_FALLBACK: {pool}"
            raise ConfigError(VARS_FILE, f"{what}: no such pool here (pools: {', '.join(sorted(zones))})", key=key)


def plan(settings: Settings, view: cloud.CloudView, conn) -> list[PlanItem]:
    """What `up` would create or reuse: the same answer for dry-run and for up's question."""
    n = resource_names(settings.name)
    items = []
    volumes = [v for v in (view.volume(n["boot_volume"]), view.volume(n["data_volume"])) if v]
    # Existing volumes pin the pool; without them, up tries POOL, then POOL_FALLBACK.
    pool = volumes[0].availability_zone if volumes else settings.pool
    where = pool if volumes else " or ".join(settings.pools())
    net, sg, key = f"{settings.name}-net-{pool}", n["security_group"], n["keypair"]
    # the preflight's questions and these beside each other: ten calls in a row took 0.4 s on the test
    # ground, and each is 10-100 times slower on a real cloud; the preflight's refusal comes first
    _, network, group, keypair = cloud.side_by_side(
        lambda: preflight(settings, view, conn),
        lambda: conn.network.find_network(net),
        lambda: conn.network.find_security_group(sg),
        lambda: conn.compute.find_keypair(key),
    )
    items.append(PlanItem("network", net, "reuse" if network else "create", settings.subnet_cidr))
    items.append(PlanItem("security group", sg, "reuse" if group else "create"))
    items.append(PlanItem("key pair", key, "reuse" if keypair else "create"))
    for label, name, size in (
        ("boot volume", n["boot_volume"], settings.boot_volume_gb),
        ("data volume", n["data_volume"], settings.data_volume_gb),
    ):
        vol = view.volume(name)
        detail = f"{vol.size} GB in {vol.availability_zone}, {vol.status}" if vol else f"{size} GB in {where}"
        if label == "boot volume" and not vol:
            detail += f" from image {settings.image}"
        items.append(PlanItem(label, name, "reuse" if vol else "create", detail))
    server = view.server(n["server"])
    if server and server.status != "ERROR":
        items.append(PlanItem("server", server.name, "reuse", f"{server.status}, {server.flavor}"))
    else:  # none, or one in ERROR that up deletes (volumes kept) and rents anew
        price = f", at most {settings.price_per_hour:g}/hour" if settings.price_per_hour is not None else ""
        flavors = " → ".join(settings.flavors())
        items.append(PlanItem("server", n["server"], "create", f"preemptible, {flavors} in {where}{price}"))
    ours = next((ip for ip in view.floating_ips if ip.description == n["floating_ip_description"]), None)
    items.append(PlanItem("floating IP", ours.address if ours else "-", "reuse" if ours else "create"))
    return items


def unguarded(state: State, server_name: str, *, created: bool, armed: bool, before: str | None) -> str | None:
    """What an up that ended early must say when it left a server it created billing with no idle-killer armed
    for it: the killer a reused boot volume brings is armed for the server before (killer_view.describe).
    before: the server id the state held when the up began (the VM before, which the idle-killer may have
    deleted overnight): an up that failed before its create leaves that id, and nothing of it bills."""
    server = state.resources.get("server")
    if not created or armed or not server or server == before:
        return None
    return (
        f"server {server_name} bills by the hour and no idle-killer is armed on it yet, so nothing deletes it "
        "when idle: `gpu-rent up` resumes and arms it, `gpu-rent stop` ends it"
    )
