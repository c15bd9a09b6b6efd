"""A VM booted by the cloud alone (issue 13, item 11): no gpu-rent run, only fstab and systemd.

A Selectel restore of an EXPIRED server, or a reboot from the panel, boots the guest with nobody
running gpu-rent. One host is made by gpu-rent's roles (playbooks/bootstrap.yml, as
test_bootstrap.py runs it); then its server is deleted and made again by bare openstacksdk from the
same two volumes, as the cloud's restore does: the data volume must be mounted from fstab, the seven
binds must come from it (not from the boot disk's empty folders under them), and SwarmUI must be up
with its backend. Last, a server from the boot volume alone: SwarmUI must not start, and say why
in its journal. One rental for the module; the re-creations reuse its volumes and floating IP.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pytest

from tests.ground.test_bootstrap import PORT, converged, run_bootstrap
from tests.groundkit import Cloud, ssh, wait_for_ssh, wait_until

pytestmark = pytest.mark.ground

MOUNT = "/mnt/swarm_data"
MARKER = f"{MOUNT}/.gpu-rent-ready"
BIND_TARGETS = [
    "/opt/swarmui/Models",
    "/opt/swarmui/Output",
    "/opt/swarmui/Data",
    "/opt/swarmui/dlbackend",
    "/opt/swarmui/src/Extensions",
    "/opt/swarmui/src/BuiltinExtensions/ComfyUIBackend/DLNodes",
    "/opt/swarmui/src/BuiltinExtensions/ComfyUIBackend/CustomWorkflows",
]
SENTINEL = "/opt/swarmui/Output/before-the-restore.txt"

# On the host: a session, then ListBackends until our self-started ComfyUI runs (or SwarmUI is gone).
BACKEND_RUNS = f"""python3 - <<'EOF'
import json, time, urllib.request
def post(route, body):
    request = urllib.request.Request("http://127.0.0.1:{PORT}/API/" + route, json.dumps(body).encode(),
                                     {{"Content-Type": "application/json"}})
    return json.load(urllib.request.urlopen(request, timeout=10))
deadline, seen = time.monotonic() + 120, None
while time.monotonic() < deadline:
    try:
        session = post("GetNewSession", {{}})["session_id"]
        seen = post("ListBackends", {{"session_id": session}})
        if any(b.get("type") == "comfyui_selfstart" and b.get("status") == "running" for b in seen.values()):
            print(json.dumps(seen)); raise SystemExit(0)
    except OSError as e:
        seen = repr(e)
    time.sleep(1)
print(json.dumps(seen)); raise SystemExit(1)
EOF"""


@dataclass
class Rental:
    cloud: Cloud
    net: object
    boot: object
    data: object
    key: str
    address: str
    server_id: str

    def sh(self, command: str, timeout: float = 150) -> str:
        result = ssh(self.address, command, timeout=timeout)
        assert result.returncode == 0, f"{command!r} on the host failed (rc {result.returncode}):\n{result.stderr}"
        return result.stdout

    def restore(self, with_data: bool) -> None:
        """Delete the server and make it again from the volumes by bare openstacksdk, as the cloud's restore
        does: no gpu-rent, no Ansible. The floating IP moves to the new server's port."""
        c = self.cloud.conn
        self.cloud.delete_server(self.server_id)
        for volume in (self.boot, self.data):
            c.block_storage.wait_for_status(volume, "available", failures=["error"], wait=120)
        server = self.cloud.server(self.net, self.boot, self.data if with_data else None, key_name=self.key,
                                   flavor="m1.small")  # fmt: skip
        self.server_id = server.id
        fip = next(c.network.ips(floating_ip_address=self.address))
        c.network.update_ip(fip, port_id=next(c.network.ports(device_id=server.id)).id)
        wait_for_ssh(self.address)
        wait_until(f"the new server {server.name} at {self.address}",
                   lambda: ssh(self.address, "hostname").stdout.strip() == server.name, timeout=60)  # fmt: skip
        # boot done: every start job of the boot transaction finished (degraded when a mount failed)
        ssh(self.address, "systemctl is-system-running --wait", timeout=120)

    def journal(self) -> str:
        return self.sh("journalctl -b --no-pager -u swarmui -u mnt-swarm_data.mount | tail -n 30")


@pytest.fixture(scope="module")
def rental(member_conn, net, tmp_path_factory):
    """One host bootstrapped by gpu-rent, with a file of the user's on its data volume."""
    cloud = Cloud(member_conn)
    started = time.monotonic()
    try:
        data = cloud.volume(4)
        boot = cloud.volume(10, image=True)
        key = cloud.keypair()
        server = cloud.server(net, boot, data, key_name=key, flavor="m1.small")  # m1.small: no GPU slot taken
        address = cloud.floating_ip(server)
        wait_for_ssh(address)
        made = run_bootstrap((address, data.id), tmp_path_factory.mktemp("bootstrap"))
        assert made.returncode == 0, converged(made)
        host = Rental(cloud, net, boot, data, key, address, server.id)
        host.sh(f"echo kept > {SENTINEL}")
        yield host
    finally:
        cloud.close()
        print(f"\ntest_cloud_boot: one rental, {time.monotonic() - started:.0f} s from rent to clean")


def devices(host: Rental) -> dict[str, str]:
    """MAJ:MIN of the data volume's disk, of what is mounted at MOUNT and at each bind target ('' if nothing)."""
    disk = f"$(readlink -f /dev/disk/by-id/virtio-{host.data.id[:20]})"
    script = f"echo disk=$(mountpoint -x {disk}); " + "".join(
        f"echo {path}=$(findmnt -no MAJ:MIN --mountpoint {path} | tail -n 1); " for path in [MOUNT, *BIND_TARGETS]
    )
    return dict(line.replace(" ", "").split("=", 1) for line in host.sh(script).splitlines())


def test_a_restore_by_the_cloud_alone_comes_up_on_its_data_volume(rental):
    rental.restore(with_data=True)
    seen = devices(rental)
    assert seen[MOUNT] == seen["disk"] != "", f"{MOUNT} is not the data volume: {seen}\n{rental.journal()}"
    wrong = {path: seen[path] for path in BIND_TARGETS if seen[path] != seen["disk"]}
    assert wrong == {}, f"binds not from the data volume ({seen['disk']}): {wrong}"
    assert rental.sh(f"cat {SENTINEL} {MARKER} >/dev/null && cat {SENTINEL}").strip() == "kept"
    assert rental.sh("systemctl is-active swarmui || true").strip() == "active", rental.journal()
    backends = ssh(rental.address, BACKEND_RUNS, timeout=150)
    assert backends.returncode == 0, f"no running comfyui_selfstart backend: {backends.stdout}\n{rental.journal()}"
    assert any(b["status"] == "running" for b in json.loads(backends.stdout).values())


def test_a_boot_volume_without_its_data_volume_does_not_start_swarmui(rental):
    rental.restore(with_data=False)
    state = rental.sh("systemctl show -p ActiveState,Result,NRestarts swarmui")  # the boot is done: decided
    journal = rental.journal()
    assert "ActiveState=inactive" in state and "NRestarts=0" in state, f"{state}\n{journal}"
    assert f"SwarmUI not started: the data volume is not mounted at {MOUNT}" in journal, journal
    mounted = [path for path in [MOUNT, *BIND_TARGETS] if ssh(rental.address, f"mountpoint -q {path}").returncode == 0]
    assert mounted == [], f"mounted although the data volume is not attached: {mounted}"
    assert rental.sh(f"ss -ltnH 'sport = :{PORT}'").strip() == ""
