"""The ground agent: makes the cloud's servers real target hosts.

Neutron here has no dataplane and Nova's fake driver runs nothing, so this
agent keeps podman containers in step with the cloud, every two seconds (COST_NOTES):

- a server that is ACTIVE and has a floating IP runs as a container with
  systemd as PID 1 and a real sshd, **at that floating IP** on the ground's
  podman network (the cloud's external network uses the same subnet);
- its root filesystem is a directory kept **per boot volume**, so a server
  re-created from the same boot volume finds what the last one installed;
- every other attached Cinder volume is a loop device over a backing file
  kept **per volume id**, passed in as /dev/vdb, /dev/vdc ... with the link
  /dev/disk/by-id/virtio-<first 20 chars of the volume id> that udev makes
  on a real VM; growing the volume in Cinder grows the device live;
- the host boots as a VM does: fstab's device entries (UUID=...) are mounted at boot, see BOOT_NOTES;
  Debian's own cloud-init runs in it (targethost/build-image.sh CLOUD_CFG_NOTES) and reads the server's
  key pair and user data from Nova's metadata service at 169.254.169.254, as on a VM; the
  agent adds only the ground's operator key (the tests' own way in) to root's authorized_keys;
- the cloud's API answers inside the host at the catalogue's URLs (127.0.0.1:5000, :8774, :9696): a
  forwarder unit in the host relays them to the gateway, where the ground relays them to the APIs
  on loopback (forward.py), so a VM's idle-killer talks to Keystone, Nova and Neutron as on a real cloud;
- when the server is deleted, shelved, stopped or loses its floating IP, its
  container is removed and the address stops answering;
- a guest that powers itself off shows SHUTOFF in Nova, as on a real cloud; one that reboots comes
  back (GUEST_SHUTDOWN_NOTES);
- backing files and root filesystems of volumes Cinder no longer has are
  deleted.

Run: python -m gpu_rent_ground.agent --state DIR --image IMAGE --network NET
     --base-rootfs DIR --operator-key FILE.pub   (admin credentials in OS_* / OS_CLOUD)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import openstack
from openstack import exceptions as os_exc

LABEL = "gpu-rent-ground"
FORWARD_UNIT = "ground-api-forward.service"
BOOT_SCRIPT = "usr/local/lib/ground/boot"
FSTAB_GENERATOR = "etc/systemd/system-generators/ground-fstab-devices"

# BOOT_NOTES: a host is a podman container with systemd as PID 1, /sys read-only and no udev. A VM
# restored or rebooted by the cloud alone (no gpu-rent run) mounts its data volume from fstab by
# UUID at boot; in a container two things stop that, and the ground stands in for exactly those two:
# 1. udev makes /dev/disk/by-id/virtio-<serial> and /dev/disk/by-uuid/<uuid> as the disk appears,
#    before anything mounts. Here the container's command is BOOT_SCRIPT: it makes those links for
#    the disks podman passed in, then execs /sbin/init (so they exist before systemd starts).
# 2. systemd-fstab-generator skips every fstab entry naming a device when it runs in a container
#    ("Running in a container, ignoring fstab device entry"), since a container's devices are
#    usually its host's. A ground host's /dev/vdX are its own disks, so FSTAB_GENERATOR writes for
#    those entries the mount units that generator writes on a VM (the rest, binds included, is
#    still systemd's own). Device units do not exist where /sys is read-only, so a missing disk
#    fails its mount at once where a VM waits 90 s for it; the outcome is the same.
# Nothing here mounts, orders or checks anything the product asks for: that is fstab and its units.
BOOT_SCRIPT_TEXT = r"""#!/bin/sh
# ground (agent.py BOOT_NOTES 1): the /dev/disk links udev makes on a VM, then systemd.
# Arguments: vdX=<virtio serial> per disk. Never fails: a host without links still boots.
mkdir -p /dev/disk/by-id /dev/disk/by-uuid
for disk in "$@"; do
  dev=${disk%%=*}
  ln -sfn "../../$dev" "/dev/disk/by-id/virtio-${disk#*=}"
  uuid=$(blkid -p -s UUID -o value "/dev/$dev" 2>/dev/null)
  [ -n "$uuid" ] && ln -sfn "../../$dev" "/dev/disk/by-uuid/$uuid"
done
exec /sbin/init
"""
FSTAB_GENERATOR_TEXT = r"""#!/bin/sh
# ground (agent.py BOOT_NOTES 2): fstab's device entries as systemd-fstab-generator writes them on a
# VM, which it skips in a container. Into the late directory ($3): anything systemd writes wins.
# Swap and the passno (fsck) are left out: a ground host has neither.
out=${3:-${1:?}}
grep -v '^[[:space:]]*#' /etc/fstab | while read -r what where type opts _rest; do
  case $what in
    UUID=*) node=/dev/disk/by-uuid/${what#UUID=} ;;
    /dev/*) node=$what ;;
    *) continue ;;
  esac
  [ "$type" = swap ] && continue
  unit=$(/usr/bin/systemd-escape -p --suffix=mount "$where")
  case ",$opts," in *,nofail,*) before= want=wants ;; *) before=Before=local-fs.target want=requires ;; esac
  printf '%s\n' "# ground-fstab-devices: $what in /etc/fstab" "[Unit]" "SourcePath=/etc/fstab" \
    "Documentation=man:fstab(5) man:systemd-fstab-generator(8)" $before \
    "[Mount]" "What=$node" "Where=$where" "Type=$type" "Options=${opts:-defaults}" > "$out/$unit"
  case ",$opts," in *,noauto,*) continue ;; esac
  mkdir -p "$out/local-fs.target.$want"
  ln -sfn "../$unit" "$out/local-fs.target.$want/$unit"
done
exit 0
"""
# COST_NOTES: the agent shares the machine's two cores with the APIs it asks and the tests. Listing
# every server in detail, every port and each attached volume once a second kept Nova's, Neutron's
# and Cinder's API busy for most of a core; per tick it now lists the floating IPs and the ids of the
# ACTIVE servers, and reads the rest when something new appears or at the intervals below; a tick
# every two seconds (a host starts within a tick of its server's ACTIVE and floating IP).
DETAILS_TTL = 20.0  # seconds a server's details (its attachments) are used before they are read again
SIZES_EVERY = 4.0  # seconds between looks at the attached volumes' sizes (resize-data waits on the growth)
# `podman ps` costs a podman process per call (3 % of the machine at a tick every two seconds): the
# containers are read again when what should run changed, after the agent started or stopped one, and
# at this interval (a host that stopped by itself is seen within it: a reboot comes back, a power-off
# turns its server SHUTOFF, GUEST_SHUTDOWN_NOTES).
CONTAINERS_EVERY = 10.0
# GUEST_SHUTDOWN_NOTES: on a VM, `poweroff` inside the guest stops the domain; libvirt tells nova-compute,
# whose power-state sync finds the instance "shutdown by itself" and calls the stop API
# (nova/compute/manager.py `_sync_instance_power_state`: compute_api.force_stop), so the server shows
# SHUTOFF and, on most clouds, Selectel's included, bills on. A `reboot` comes back as the same server.
# A host here gets CAP_SYS_BOOT, as root on a VM has it: reboot(2) in a PID namespace ends that
# namespace's init with SIGHUP for a restart and SIGINT for a power-off or halt (kernel/pid_namespace.c
# `reboot_pid_ns`), so podman reports the container exited with 129 or 130. The agent starts a host
# again after 129 (and after anything else, as before), and after 130 asks Nova to stop the server
# as the power sync does; Nova's fake driver has no guest to tell it.
EXIT_REBOOT, EXIT_POWEROFF = 128 + signal.SIGHUP, 128 + signal.SIGINT
STOPPED_SECONDS = 30.0  # not started again this long after a stop was asked (Nova turns it SHUTOFF within it)
log = logging.getLogger("ground-agent")


@dataclass(frozen=True)
class DataDisk:
    volume_id: str
    size_gb: int
    guest_device: str  # vdb, vdc, ...


@dataclass(frozen=True)
class HostSpec:
    server_id: str
    hostname: str
    address: str
    boot_volume_id: str
    disks: tuple[DataDisk, ...]

    @property
    def container(self) -> str:
        return f"gr-{self.server_id}"


def run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def hostname_for(name: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    return (cleaned or "server")[:63]


class Agent:
    def __init__(self, conn, state: Path, image: str, network: str, base_rootfs: Path, operator_key: str,
                 api_gateway: str = "", api_ports: str = ""):  # fmt: skip
        self.conn = conn
        self.api_gateway = api_gateway
        self.api_ports = api_ports
        self.state = state
        self.image = image
        self.network = network
        self.base_rootfs = base_rootfs
        self.operator_key = operator_key.strip()
        self.volumes_dir = state / "volumes"
        self.rootfs_dir = state / "rootfs"
        self.volumes_dir.mkdir(parents=True, exist_ok=True)
        self.rootfs_dir.mkdir(parents=True, exist_ok=True)
        self.last_gc = 0.0
        self.last_sizes = 0.0
        self.server_of_port: dict[str, str] = {}
        self.ports_read = 0.0
        self.details: dict[str, tuple[object, float]] = {}  # server id -> (server, when read)
        self.containers: dict[str, dict] = {}
        self.containers_read = 0.0
        self.containers_for: object = None  # what was wanted when the containers were read
        self.powered_off: dict[str, float] = {}  # server id -> when its guest's power-off was handed to Nova

    # ---------------------------------------------------------------- cloud
    def wanted(self) -> dict[str, tuple[object, str]]:
        """server id -> (server, floating IP) for every server that should run.

        Cheap enough for every tick (COST_NOTES): the floating IPs and the ids of ACTIVE servers are
        listed anew; a server's details are read when it turns ACTIVE and again every DETAILS_TTL
        seconds (attachments change only at create on the ground), the ports when a floating IP
        names a port not seen before and at that same interval."""
        bound = {ip.port_id: ip.floating_ip_address for ip in self.conn.network.ips() if ip.port_id}
        if any(port not in self.server_of_port for port in bound) or time.monotonic() - self.ports_read > DETAILS_TTL:
            self.server_of_port = {p.id: p.device_id for p in self.conn.network.ports()}
            self.ports_read = time.monotonic()
        address_of_server = {self.server_of_port.get(port): address for port, address in bound.items()}
        active = {s.id for s in self.conn.compute.servers(details=False, all_projects=True, status="ACTIVE")}
        now = time.monotonic()
        for server_id in list(self.details):
            if server_id not in active or now - self.details[server_id][1] > DETAILS_TTL:
                del self.details[server_id]
        wanted = {}
        for server_id in active & address_of_server.keys():
            if server_id not in self.details:
                try:
                    server = self.conn.compute.get_server(server_id)
                except os_exc.NotFoundException:
                    continue  # deleted since the list
                if server.status != "ACTIVE":
                    continue
                self.details[server_id] = (server, now)
            wanted[server_id] = (self.details[server_id][0], address_of_server[server_id])
        return wanted

    def spec(self, server, address: str) -> HostSpec | None:
        attachments = sorted(self.conn.compute.volume_attachments(server), key=lambda a: a.device or "")
        root = server.root_device_name or "/dev/vda"
        boot = [a for a in attachments if a.device == root]
        if not boot:
            log.warning("server %s has no volume at %s: not a boot-from-volume server, no host", server.id, root)
            return None
        disks = []
        for index, attachment in enumerate(a for a in attachments if a.device != root):
            volume = self.conn.block_storage.get_volume(attachment.volume_id)
            disks.append(DataDisk(attachment.volume_id, volume.size, f"vd{chr(ord('b') + index)}"))
        return HostSpec(
            server_id=server.id,
            hostname=hostname_for(server.name),
            address=address,
            boot_volume_id=boot[0].volume_id,
            disks=tuple(disks),
        )

    # ---------------------------------------------------------------- podman
    def running(self) -> dict[str, dict]:
        out = run("podman", "ps", "-a", "--filter", f"label={LABEL}", "--format", "json").stdout
        return {c["Names"][0]: c for c in json.loads(out or "[]")}

    def start(self, spec: HostSpec) -> None:
        rootfs = self.rootfs(spec.boot_volume_id)
        self.prepare(rootfs, spec)
        devices = []
        for disk in spec.disks:
            loop = self.attach(disk)
            devices += ["--device", f"{loop}:/dev/{disk.guest_device}"]
        run(
            "podman", "run", "-d", "--name", spec.container,
            "--label", LABEL, "--label", f"{LABEL}.address={spec.address}",
            "--label", f"{LABEL}.boot={spec.boot_volume_id}",
            "--label", f"{LABEL}.volumes={','.join(d.volume_id for d in spec.disks)}",
            "--network", self.network, "--ip", spec.address, "--hostname", spec.hostname,
            # SYS_RESOURCE: root on a VM grows a mounted ext4 online (resize2fs), as resize-data does
            # SYS_BOOT: a reboot or power-off inside ends the host with its own exit code (GUEST_SHUTDOWN_NOTES)
            "--systemd=always", "--cap-add", "SYS_ADMIN", "--cap-add", "SYS_RESOURCE", "--cap-add", "SYS_BOOT",
            # what a VM's DMI says: cloud-init's detect_openstack (DataSourceOpenStack.py) reads it from PID 1
            "--env", "product_name=OpenStack Nova",
            *devices,
            # BOOT_NOTES 1: the /dev/disk links, then /sbin/init
            "--rootfs", str(rootfs), f"/{BOOT_SCRIPT}", *(f"{d.guest_device}={d.volume_id[:20]}" for d in spec.disks),
        )  # fmt: skip
        log.info("host up: server %s at %s, boot volume %s, disks %s", spec.server_id, spec.address,
                 spec.boot_volume_id, [(d.guest_device, d.volume_id) for d in spec.disks])  # fmt: skip

    def stop(self, name: str, container: dict) -> None:
        run("podman", "rm", "-f", "-t", "5", name, check=False)
        for volume_id in _volumes(container.get("Labels") or {}):
            self.detach(self.volumes_dir / f"{volume_id}.img")
        log.info("host down: %s", name)

    # ---------------------------------------------------------------- disks
    def rootfs(self, boot_volume_id: str) -> Path:
        rootfs = self.rootfs_dir / boot_volume_id
        if not rootfs.exists():
            partial = rootfs.with_name(rootfs.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            run("cp", "-a", str(self.base_rootfs), str(partial))
            (partial / ".gpu-rent-ground-built").unlink(missing_ok=True)
            partial.rename(rootfs)  # no host keys: cloud-init makes this boot volume's own at its first boot
        return rootfs

    def prepare(self, rootfs: Path, spec: HostSpec) -> None:
        """What the ground adds to a host before it boots: its operator key, the boot's stand-ins for udev and
        the fstab generator (BOOT_NOTES) and the API forwarder. The rest is cloud-init's, in the host."""
        ssh_dir = rootfs / "root/.ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        keys_file = ssh_dir / "authorized_keys"
        present = keys_file.read_text().splitlines() if keys_file.exists() else []
        if self.operator_key not in present:
            keys_file.write_text("".join(f"{k}\n" for k in [*present, self.operator_key]))
        keys_file.chmod(0o600)
        for path, text in ((BOOT_SCRIPT, BOOT_SCRIPT_TEXT), (FSTAB_GENERATOR, FSTAB_GENERATOR_TEXT)):
            program = rootfs / path
            program.parent.mkdir(parents=True, exist_ok=True)
            program.write_text(text)
            program.chmod(0o755)
        if self.api_gateway:
            self._api_forwarder(rootfs)

    def _api_forwarder(self, rootfs: Path) -> None:
        program = rootfs / "usr/local/lib/ground/forward.py"
        program.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(__file__).with_name("forward.py"), program)
        unit = rootfs / "etc/systemd/system" / FORWARD_UNIT
        # It stands in for the VM's network to the cloud, so it is ordered as the network is: up before
        # network.target, and stopped only after every unit ordered after the network at a shutdown (the
        # idle-killer's last breath deletes the server from there, as on a VM whose network is still up).
        unit.write_text(
            "[Unit]\nDescription=ground: the cloud's API at the catalogue's 127.0.0.1 URLs\n"
            "Wants=network.target\nBefore=network.target\n"
            "[Service]\nExecStart=/usr/bin/python3 /usr/local/lib/ground/forward.py"
            f" --listen 127.0.0.1 --to {self.api_gateway} --ports {self.api_ports}\nRestart=always\n"
            "[Install]\nWantedBy=multi-user.target\n"
        )
        wants = rootfs / "etc/systemd/system/multi-user.target.wants"
        wants.mkdir(parents=True, exist_ok=True)
        link = wants / FORWARD_UNIT
        if not link.is_symlink():
            link.symlink_to(f"../{FORWARD_UNIT}")

    def attach(self, disk: DataDisk) -> str:
        backing = self.volumes_dir / f"{disk.volume_id}.img"
        if not backing.exists():
            with open(backing, "wb") as f:
                f.truncate(disk.size_gb * 1024**3)
        existing = run("losetup", "-j", str(backing), "-O", "NAME", "-n").stdout.split()
        if existing:
            return existing[0]
        return run("losetup", "--find", "--show", str(backing)).stdout.strip()

    @staticmethod
    def detach(backing: Path) -> None:
        for loop in run("losetup", "-j", str(backing), "-O", "NAME", "-n", check=False).stdout.split():
            run("losetup", "-d", loop, check=False)

    def collect_garbage(self, running: dict[str, dict]) -> None:
        """Delete the bytes of volumes that Cinder no longer has."""
        known = {v.id for v in self.conn.block_storage.volumes(details=False, all_projects=True)}
        in_use = set()
        for container in running.values():
            labels = container.get("Labels") or {}
            in_use.update([labels.get(f"{LABEL}.boot", ""), *_volumes(labels)])
        for backing in self.volumes_dir.glob("*.img"):
            if backing.stem not in known and backing.stem not in in_use:
                self.detach(backing)
                backing.unlink()
                log.info("volume %s deleted in Cinder: backing file removed", backing.stem)
        for rootfs in self.rootfs_dir.iterdir():
            if rootfs.name not in known and rootfs.name not in in_use and not rootfs.name.endswith(".partial"):
                shutil.rmtree(rootfs, ignore_errors=True)
                log.info("boot volume %s deleted in Cinder: root filesystem removed", rootfs.name)

    # ---------------------------------------------------------------- loop
    def containers_now(self, wanted: dict[str, tuple[object, str]]) -> dict[str, dict]:
        """The ground's containers, read again only when needed (CONTAINERS_EVERY)."""
        key = sorted((sid, address, tuple(sorted(v["id"] for v in server.attached_volumes or [])))
                     for sid, (server, address) in wanted.items())  # fmt: skip
        if key != self.containers_for or time.monotonic() - self.containers_read > CONTAINERS_EVERY:
            self.containers, self.containers_read, self.containers_for = self.running(), time.monotonic(), key
        return self.containers

    def tick(self) -> dict:
        wanted = self.wanted()
        hosts = {}
        for name, container in self.containers_now(wanted).items():
            server_id = name.removeprefix("gr-")
            labels = container.get("Labels") or {}
            if server_id in wanted and container.get("State") == "running":
                server, address = wanted[server_id]
                attached = sorted(v["id"] for v in server.attached_volumes or [])
                had = sorted([labels.get(f"{LABEL}.boot", ""), *_volumes(labels)])
                if labels.get(f"{LABEL}.address") == address and attached == had:
                    hosts[server_id] = {"container": name, "address": address}
                    continue
            self.containers_read = 0.0  # before anything later in this tick can raise
            self.stop(name, container)
            powered_off = container.get("State") == "exited" and container.get("ExitCode") == EXIT_POWEROFF
            if server_id in wanted and powered_off:
                self._powered_off(server_id)
        for server_id, (server, address) in wanted.items():
            if server_id in self.powered_off and time.monotonic() - self.powered_off[server_id] < STOPPED_SECONDS:
                continue  # Nova turns it SHUTOFF: not started again meanwhile
            if server_id not in hosts:
                spec = self.spec(server, address)
                if spec is None:
                    continue
                self.containers_read = 0.0  # what runs is read again next tick, even should this tick raise
                try:
                    self.start(spec)
                except subprocess.CalledProcessError as e:
                    log.error("could not start host for %s: %s %s", server_id, e.stderr.strip(), e.stdout.strip())
                    run("podman", "rm", "-f", spec.container, check=False)
                    continue
                hosts[server_id] = {"container": spec.container, "address": address}
        if time.monotonic() - self.last_sizes > SIZES_EVERY:
            self._grow_if_extended([server for server, _ in wanted.values()])
            self.last_sizes = time.monotonic()
        if time.monotonic() - self.last_gc > 10:
            self.collect_garbage(self.containers_now(wanted))
            self.last_gc = time.monotonic()
        return hosts

    def _powered_off(self, server_id: str) -> None:
        """The guest powered itself off: what nova-compute's power sync does then (GUEST_SHUTDOWN_NOTES)."""
        self.powered_off[server_id] = time.monotonic()
        try:
            self.conn.compute.stop_server(server_id)
            log.info("server %s: guest powered off, stopped in Nova (SHUTOFF)", server_id)
        except os_exc.SDKException as e:  # deleted meanwhile (the idle-killer's last breath), or a task runs
            log.info("server %s: guest powered off; not stopped in Nova: %s", server_id, e)

    def _grow_if_extended(self, servers: list) -> None:
        """Cinder extend: grow the backing file, then tell the loop device (one volume list for all)."""
        attached = {ref["id"] for server in servers for ref in server.attached_volumes or []}
        backings = {v: self.volumes_dir / f"{v}.img" for v in attached if (self.volumes_dir / f"{v}.img").exists()}
        if not backings:
            return
        for volume in self.conn.block_storage.volumes(details=True, all_projects=True):
            backing = backings.get(volume.id)
            if backing is None or backing.stat().st_size >= volume.size * 1024**3:
                continue
            with open(backing, "r+b") as f:
                f.truncate(volume.size * 1024**3)
            for loop in run("losetup", "-j", str(backing), "-O", "NAME", "-n").stdout.split():
                run("losetup", "-c", loop)
            log.info("volume %s grown to %s bytes", volume.id, volume.size * 1024**3)


def _volumes(labels: dict) -> list[str]:
    return [v for v in labels.get(f"{LABEL}.volumes", "").split(",") if v]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--image", required=True)
    parser.add_argument("--network", required=True)
    parser.add_argument("--base-rootfs", type=Path, required=True)
    parser.add_argument("--operator-key", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--api-gateway", default="", help="the hosts' route to the cloud's API")
    parser.add_argument("--api-ports", default="", help="comma-separated API ports the hosts reach")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("openstack").setLevel(logging.WARNING)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    conn = openstack.connect()
    agent = Agent(conn, args.state, args.image, args.network, args.base_rootfs, args.operator_key.read_text(),
                  args.api_gateway, args.api_ports)  # fmt: skip
    status_file = args.state / "agent-status.json"
    while not stopping:
        started = time.monotonic()
        try:
            hosts = agent.tick()
            tmp = status_file.with_suffix(".tmp")
            tmp.write_text(json.dumps({"time": time.time(), "hosts": hosts}, indent=1))
            os.replace(tmp, status_file)
        except Exception:  # the agent must outlive a cloud hiccup (tests stop services on purpose)
            log.exception("tick failed; retrying")
        time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
    log.info("agent stopped; hosts keep running until ground-down removes them")


if __name__ == "__main__":
    main()
