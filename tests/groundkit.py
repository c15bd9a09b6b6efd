"""Helpers for tests that run on the test ground (make ground-up).

The ground is real: an OpenStack on 127.0.0.1 and target hosts at floating
IPs. These helpers only create, wait and clean up; they fake nothing.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import openstack
import pytest
from openstack import exceptions as os_exc

REPO = Path(__file__).resolve().parents[1]
GROUND = Path(os.environ.get("GROUND_DIR", REPO / ".ground"))
CLOUDS_YAML = GROUND / "clouds.yaml"
PROJECT = GROUND / "project"
USER_KEY = PROJECT / "id_ed25519"
IMAGE = "Debian 12 64-bit GPU optimized"
POOL = "ru-7a"


# How tests reach a ground host as an operator's inventory would: root, the project's key, no known_hosts
# (every host is new, and addresses come back with new host keys).
HOST_VARS = {
    "ansible_user": "root",
    "ansible_ssh_private_key_file": str(USER_KEY),
    "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
}


def ground_missing() -> str | None:
    """Why the ground cannot be used, or None when it answers."""
    if not CLOUDS_YAML.exists():
        return f"test ground not running: {CLOUDS_YAML} is missing (make ground-up)"
    try:
        connect("ground").authorize()
    except Exception as e:  # any failure means: not usable
        return f"test ground not answering at Keystone ({type(e).__name__}): make ground-up"
    return None


def require_ground() -> None:
    reason = ground_missing()
    if reason is None:
        return
    if os.environ.get("CI"):  # CI starts the ground; a missing one is a failure there
        pytest.fail(reason)
    pytest.skip(reason)


def connect(cloud: str) -> openstack.connection.Connection:
    config = openstack.config.OpenStackConfig(config_files=[str(CLOUDS_YAML)])
    return openstack.connection.Connection(config=config.get_one(cloud))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(what: str, check: Callable[[], object], timeout: float = 120, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def ssh_argv(key: Path = USER_KEY) -> list[str]:
    """ssh to a ground host, up to the destination: with the test key, no host key kept, quiet."""
    return [
        "ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=3",
    ]  # fmt: skip


def ssh(address: str, command: str, key: Path = USER_KEY, timeout: float = 30) -> subprocess.CompletedProcess:
    # stdin not the suite's: ssh would set that non-blocking while a Molecule run's ansible-playbook starts
    return subprocess.run([*ssh_argv(key), f"root@{address}", command], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def wait_for_ssh(address: str, timeout: float = 90) -> None:
    wait_until(f"SSH at {address}", lambda: ssh(address, "true").returncode == 0, timeout, 0.5)


def killer_credentials(conn, name: str) -> list:
    """The idle-killer credentials made under name (the module adds the project id and the region)."""
    user = conn.current_user_id
    return [c for c in conn.identity.application_credentials(user) if c.name.startswith(f"{name}-")]


def drop_killer_credentials(conn, name: str) -> None:
    for cred in killer_credentials(conn, name):
        conn.identity.delete_application_credential(conn.current_user_id, cred.id)


class Cloud:
    """One member connection plus everything a test created, deleted at the end."""

    def __init__(self, conn):
        self.conn = conn
        self.cleanups: list[Callable[[], None]] = []

    def later(self, fn: Callable[[], None]) -> None:
        self.cleanups.append(fn)

    def close(self) -> None:
        for fn in reversed(self.cleanups):
            with contextlib.suppress(os_exc.NotFoundException):
                fn()

    # ------------------------------------------------------------ resources
    def network(self) -> tuple:
        c = self.conn
        net = c.network.create_network(name=unique("t-net"))
        self.later(lambda: c.network.delete_network(net, ignore_missing=True))
        subnet = c.network.create_subnet(network_id=net.id, cidr="192.168.50.0/24", ip_version=4, name=unique("t-sub"))
        ext = c.network.find_network("external")
        router = c.network.create_router(name=unique("t-router"), external_gateway_info={"network_id": ext.id})
        c.network.add_interface_to_router(router, subnet_id=subnet.id)

        def drop_router():
            c.network.remove_interface_from_router(router, subnet=subnet.id)
            c.network.delete_router(router, ignore_missing=True)

        self.later(drop_router)
        return net, subnet

    def keypair(self) -> str:
        name = unique("t-key")
        self.conn.compute.create_keypair(name=name, public_key=USER_KEY.with_suffix(".pub").read_text())
        self.later(lambda: self.conn.compute.delete_keypair(name, ignore_missing=True))
        return name

    def volume(self, size: int, image: bool = False, name: str | None = None):
        c = self.conn
        kwargs = {"image_id": c.image.find_image(IMAGE).id} if image else {}
        vol = c.block_storage.create_volume(
            size=size, name=name or unique("t-vol"), availability_zone=POOL, volume_type=f"fast.{POOL}", **kwargs
        )

        def drop():
            wait_until(f"volume {vol.id} free", lambda: self._volume_free(vol.id), 120)
            c.block_storage.delete_volume(vol.id, ignore_missing=True)

        self.later(drop)
        return c.block_storage.wait_for_status(vol, "available", failures=["error"], wait=60)

    def _volume_free(self, volume_id: str) -> bool:
        vol = self.conn.block_storage.find_volume(volume_id, ignore_missing=True)
        return vol is None or vol.status in ("available", "error")

    def server(
        self, net, boot, data=None, flavor: str = "gpu.l4.1", key_name: str | None = None, wait: bool = True, **kw
    ):
        c = self.conn
        bdm = [{"boot_index": 0, "uuid": boot.id, "source_type": "volume", "destination_type": "volume",
                "delete_on_termination": False}]  # fmt: skip
        if data is not None:
            bdm.append({"boot_index": -1, "uuid": data.id, "source_type": "volume", "destination_type": "volume",
                        "delete_on_termination": False})  # fmt: skip
        server = c.compute.create_server(
            name=kw.pop("name", unique("t-vm")), flavor_id=c.compute.find_flavor(flavor).id,
            networks=[{"uuid": net.id}], block_device_mapping=bdm, availability_zone=POOL,
            **({"key_name": key_name} if key_name else {}), **kw,
        )  # fmt: skip
        self.later(lambda: self.delete_server(server.id))
        if wait:
            server = c.compute.wait_for_server(server, status="ACTIVE", failures=["ERROR"], wait=120)
        return server

    def delete_server(self, server_id: str) -> None:
        c = self.conn
        server = c.compute.find_server(server_id, ignore_missing=True)
        if server is not None:
            c.compute.delete_server(server)
            c.compute.wait_for_delete(server, wait=120)

    def floating_ip(self, server):
        c = self.conn
        port = next(c.network.ports(device_id=server.id))
        fip = c.network.create_ip(floating_network_id=c.network.find_network("external").id, port_id=port.id)
        self.later(lambda: c.network.delete_ip(fip, ignore_missing=True))
        return fip.floating_ip_address
