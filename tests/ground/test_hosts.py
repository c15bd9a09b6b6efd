"""The ground's servers are real hosts: SSH at the floating IP, a real data disk.

The tests that only look at a host share one (`host`); those that delete a server rent their own.
Shelving (what a preemption leaves) is proved end to end in test_rental.py: the host stops answering,
and comes back with its root disk's files."""

import json
import subprocess
from pathlib import Path

import pytest

from tests.groundkit import GROUND, Cloud, ssh, wait_for_ssh, wait_until
from tests.module_file import load

UTILS = Path(__file__).resolve().parents[2] / "plugins" / "module_utils"
warm = load("gpu_rent_warm_start_hosts", UTILS / "gpu_rent_warm_start.py")
KEEP_HOST_KEYS = warm.KEEP_HOST_KEYS_USER_DATA  # what up's creates from kept volumes carry


def _gone(address: str) -> bool:
    result = ssh(address, "true")
    return result.returncode == 255


@pytest.fixture(scope="module")
def host(member_conn, net):
    """server, its data volume and its address: a host with a key pair and a blank 4 GB data disk."""
    cloud = Cloud(member_conn)
    try:
        boot, data = cloud.volume(10, image=True), cloud.volume(4)
        server = cloud.server(net, boot, data, key_name=cloud.keypair(), name="gpu-rent-vm")
        address = cloud.floating_ip(server)
        wait_for_ssh(address)
        yield server, data, address
    finally:
        cloud.close()


def test_floating_ip_reaches_a_systemd_host_that_sees_its_data_disk_by_id(host):
    _, data, address = host
    out = ssh(address, f"cat /proc/1/comm; hostname; readlink -f /dev/disk/by-id/virtio-{data.id[:20]}; "
                       "blkid -p /dev/vdb; echo rc=$?; "
                       "systemctl is-system-running --wait || true").stdout.split()  # fmt: skip
    assert out[0] == "systemd"
    assert out[1] == "gpu-rent-vm"
    assert out[2] == "/dev/vdb"
    assert "rc=2" in out  # blkid: nothing on the disk yet
    assert out[-1] in ("running", "degraded")
    size = ssh(address, "blockdev --getsize64 /dev/vdb").stdout.strip()
    assert int(size) == 4 * 1024**3


def test_cloud_init_booted_the_host_from_the_metadata_service(host):
    """Debian's cloud-init, not the ground, read who this host is: its datasource, its instance id, the key pair."""
    server, _, address = host
    out = ssh(
        address, "cloud-init status --wait >/dev/null; cloud-init status; cat /run/cloud-init/instance-data.json"
    ).stdout
    assert out.startswith("status: done"), out[:500]
    data = json.loads(out[out.index("{") :])
    assert data["v1"]["instance_id"] == server.id and data["v1"]["platform"] == "openstack"
    assert data["v1"]["public_ssh_keys"]  # the key pair that let the test in came this way


def test_data_and_root_files_survive_a_new_server_on_the_same_volumes(cloud, net):
    boot, data = cloud.volume(10, image=True), cloud.volume(4)
    key = cloud.keypair()
    first = cloud.server(net, boot, data, key_name=key)
    address = cloud.floating_ip(first)
    wait_for_ssh(address)
    disk = f"/dev/disk/by-id/virtio-{data.id[:20]}"
    setup = (
        f"mkfs.ext4 -q {disk} && mkdir -p /mnt/swarm_data && mount {disk} /mnt/swarm_data && "
        "echo models > /mnt/swarm_data/keep.txt && umount /mnt/swarm_data && echo installed > /root/boot-marker"
    )
    assert ssh(address, setup).returncode == 0
    host_keys = ssh(address, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout

    cloud.delete_server(first.id)
    wait_until(f"{address} to stop answering", lambda: _gone(address), 60)  # the host went with its server
    assert ssh(address, "true").returncode == 255

    # the product's user data: cloud-init keeps the host keys (by default it makes new ones per instance)
    second = cloud.server(net, boot, data, key_name=key, user_data=KEEP_HOST_KEYS)
    address = cloud.floating_ip(second)
    wait_for_ssh(address)
    check = (
        f"mount {disk} /mnt/swarm_data && "
        "cat /mnt/swarm_data/keep.txt /root/boot-marker /etc/ssh/ssh_host_ed25519_key.pub"
    )
    lines = ssh(address, check).stdout.splitlines()
    assert lines[:2] == ["models", "installed"]
    assert lines[2] == host_keys.strip()  # the same boot volume keeps its host keys, as up pins them

    # without it, as on a real VM, a new instance gets new host keys: what the user data is for
    cloud.delete_server(second.id)
    wait_until(f"{address} to stop answering", lambda: _gone(address), 60)
    third = cloud.server(net, boot, data, key_name=key)
    address = cloud.floating_ip(third)
    wait_for_ssh(address)
    assert ssh(address, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.strip() not in ("", host_keys.strip())


def test_only_the_servers_key_pair_and_the_operator_key_are_let_in(host, tmp_path):
    address = host[2]
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    assert ssh(address, "true", key=stranger).returncode == 255


def test_agent_reports_the_hosts_it_runs(host):
    server, _, address = host
    status = json.loads((GROUND / "state/hosts/agent-status.json").read_text())
    assert status["hosts"][server.id]["address"] == address


def test_each_host_reads_its_own_server_from_the_metadata_service(host, member_conn):
    """169.254.169.254 answers as on a real cloud: Nova's metadata API behind Neutron's signing proxy, the
    instance found from the asking host's address, the server's metadata there once set through the API."""
    server, _, address = host
    meta_url = "http://169.254.169.254/openstack/latest/meta_data.json"
    said = json.loads(ssh(address, f"curl -sf --max-time 10 {meta_url}").stdout)
    assert said["uuid"] == server.id
    assert said["project_id"] == member_conn.current_project_id
    member_conn.compute.set_server_metadata(server, gpu_rent_probe="seen")

    # Nova's metadata API caches an instance's answer for metadata_cache_expiration (15 s by default)
    def meta() -> dict:
        return json.loads(ssh(address, f"curl -sf --max-time 10 {meta_url}").stdout or "{}").get("meta", {})

    wait_until("the server's metadata in the metadata service", lambda: meta().get("gpu_rent_probe") == "seen", 40, 2)


def test_the_metadata_api_refuses_an_unsigned_or_foreign_instance_id(host):
    """The real Nova checks the proxy's HMAC: a request naming an instance without the shared secret is
    refused (so a host could not read another server's metadata by forging headers to Nova)."""
    server, _, _ = host
    url = "http://127.0.0.1:8775/openstack/latest/meta_data.json"
    forged = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", f"X-Instance-ID: {server.id}",
                             "-H", "X-Tenant-ID: x", "-H", "X-Instance-ID-Signature: 00", url],
                            capture_output=True, text=True)  # fmt: skip
    assert forged.stdout == "403"


def test_a_guest_poweroff_shows_shutoff_and_a_reboot_comes_back(cloud, net, member_conn):
    """As on a real cloud (agent.py GUEST_SHUTDOWN_NOTES): `reboot` inside keeps the server ACTIVE and the
    host comes back; `poweroff` inside turns the server SHUTOFF, which bills, and the host is gone."""
    boot, data = cloud.volume(10, image=True), cloud.volume(4)
    server = cloud.server(net, boot, data, key_name=cloud.keypair())
    address = cloud.floating_ip(server)
    wait_for_ssh(address)
    first_boot = ssh(address, "cat /proc/sys/kernel/random/boot_id; cat /proc/1/stat").stdout
    ssh(address, "systemctl --no-block reboot")
    wait_until("the host back from its reboot", lambda: ssh(address, "cat /proc/sys/kernel/random/boot_id; "
               "cat /proc/1/stat").stdout not in ("", first_boot), 90, 1)  # fmt: skip
    assert member_conn.compute.get_server(server.id).status == "ACTIVE"

    ssh(address, "systemctl --no-block poweroff")
    wait_until("the server SHUTOFF", lambda: member_conn.compute.get_server(server.id).status == "SHUTOFF", 60, 1)
    assert _gone(address)
    assert {member_conn.block_storage.get_volume(v.id).status for v in (boot, data)} == {"in-use"}
