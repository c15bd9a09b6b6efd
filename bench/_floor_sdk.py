"""bench/warm_up.py's floor: what a bare openstacksdk program takes, from its own start, for a warm `up` or a `stop`.

warm_up.py runs it as a process of its own, as gpu-rent runs: its python start, imports, login and lookups by
name count as ours do (ours reads no more than the names either). Nothing here but openstacksdk and ssh:
not tests/groundkit's ssh and wait_until, whose module imports pytest, a start-up no bare program pays.

    _floor_sdk.py up NAME POOL FLAVOR SSH_ARGV_JSON   a server NAME-floor from NAME-boot and NAME-data
    _floor_sdk.py stop NAME                           delete it, wait until it is gone, delete its address

Each prints one JSON line of time.time() marks: up {"login", "created", "answered"}, stop {"login"}.
OS_CLIENT_CONFIG_FILE names the ground's clouds.yaml (cloud "ground").
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import openstack

NEW_SESSION = "curl -sf -X POST -H 'Content-Type: application/json' -d '{}' http://127.0.0.1:7801/API/GetNewSession"


def ssh(argv: list[str], address: str, command: str, timeout: float = 30) -> int:
    argv = [*argv, f"root@{address}", command]
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout).returncode


def until(what: str, check, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            sys.exit(f"floor: {what} not within {timeout:.0f} s")
        time.sleep(0.5)


def up(c, name: str, pool: str, flavor: str, ssh_argv: list[str]) -> dict:
    marks = {"login": time.time()}
    boot = c.block_storage.find_volume(f"{name}-boot", ignore_missing=False)
    data = c.block_storage.find_volume(f"{name}-data", ignore_missing=False)
    net = c.network.find_network(f"{name}-net-{pool}", ignore_missing=False)
    group = c.network.find_security_group(f"{name}-ssh", ignore_missing=False)
    server = c.compute.create_server(
        name=f"{name}-floor", flavor_id=c.compute.find_flavor(flavor, ignore_missing=False).id,
        networks=[{"uuid": net.id}], availability_zone=pool, key_name=f"{name}-key",
        security_groups=[{"name": group.id}],
        block_device_mapping=[
            {"boot_index": 0, "uuid": boot.id, "source_type": "volume", "destination_type": "volume",
             "delete_on_termination": False},
            {"boot_index": -1, "uuid": data.id, "source_type": "volume", "destination_type": "volume",
             "delete_on_termination": False},
        ],
    )  # fmt: skip
    marks["created"] = time.time()
    external = next(c.network.networks(is_router_external=True))
    fip = c.network.create_ip(floating_network_id=external.id, description=f"{name} floor")
    server = c.compute.wait_for_server(server, status="ACTIVE", failures=["ERROR"], wait=300, interval=1)
    port = next(c.network.ports(device_id=server.id))
    c.network.update_ip(fip, port_id=port.id)
    address = fip.floating_ip_address
    until("sshd", lambda: ssh(ssh_argv, address, "true") == 0)
    marks["answered"] = time.time()
    if ssh(ssh_argv, address, "systemctl restart swarmui", timeout=120) != 0:
        sys.exit("floor: systemctl restart swarmui failed")
    until("SwarmUI's GetNewSession after its restart", lambda: ssh(ssh_argv, address, NEW_SESSION) == 0)
    return marks


def stop(c, name: str) -> dict:
    marks = {"login": time.time()}
    server = c.compute.find_server(f"{name}-floor", ignore_missing=False)
    c.compute.delete_server(server)
    c.compute.wait_for_delete(server, interval=1, wait=300)
    for ip in c.network.ips(description=f"{name} floor"):
        c.network.delete_ip(ip)
    return marks


def main() -> None:
    conn = openstack.connect(cloud="ground")
    conn.authorize()
    if sys.argv[1] == "up":
        marks = up(conn, sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5]))
    else:
        marks = stop(conn, sys.argv[2])
    print(json.dumps(marks))


if __name__ == "__main__":
    main()
