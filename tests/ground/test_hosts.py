"""The ground's servers are real hosts: SSH at the floating IP, a real data disk.

The tests that only look at a host share one (`host`); those that delete a server rent their own.
Shelving (what a preemption leaves) is proved end to end in test_rental.py: the host stops answering,
and comes back with its root disk's files."""

import json
import subprocess

import pytest

from tests.groundkit import GROUND, Cloud, ssh, wait_for_ssh, wait_until


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
                       "blkid -p /dev/vdb; echo rc=$?; systemctl is-system-running || true").stdout.split()  # fmt: skip
    assert out[0] == "systemd"
    assert out[1] == "gpu-rent-vm"
    assert out[2] == "/dev/vdb"
    assert "rc=2" in out  # blkid: nothing on the disk yet
    assert out[-1] in ("running", "degraded")
    size = ssh(address, "blockdev --getsize64 /dev/vdb").stdout.strip()
    assert int(size) == 4 * 1024**3


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

    second = cloud.server(net, boot, data, key_name=key)
    address = cloud.floating_ip(second)
    wait_for_ssh(address)
    check = (
        f"mount {disk} /mnt/swarm_data && "
        "cat /mnt/swarm_data/keep.txt /root/boot-marker /etc/ssh/ssh_host_ed25519_key.pub"
    )
    lines = ssh(address, check).stdout.splitlines()
    assert lines[:2] == ["models", "installed"]
    assert lines[2] == host_keys.strip()  # the same boot volume keeps its host keys, like a real disk


def test_only_the_servers_key_pair_and_the_operator_key_are_let_in(host, tmp_path):
    address = host[2]
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    assert ssh(address, "true", key=stranger).returncode == 255


def test_agent_reports_the_hosts_it_runs(host):
    server, _, address = host
    status = json.loads((GROUND / "state/hosts/agent-status.json").read_text())
    assert status["hosts"][server.id]["address"] == address
