"""What up's one lookup asks the cloud (plugins/modules/rental_lookup.py), in plain openstacksdk.

Kept apart from the module so that another caller can ask the same questions: `gpu-rent up` does
(gpu_rent/rental/up_head_start.py) and hands the answer to up.yml as data read from a file - never as an extra var,
which ansible-core 2.19 renders as a trusted template, the cloud's strings with it.
"""

from __future__ import annotations

import threading

# The questions, as rental_lookup's options: every one may be left out (empty or None).
QUESTIONS = (
    "flavors",
    "keypair",
    "volumes",
    "snapshot",
    "external_network",
    "networks",
    "subnets",
    "routers",
    "security_group",
    "server",
    "floating_ip_description",
)


def lookup(conn, asked: dict) -> dict:
    """The answers, each in the shape of the info module of the same question (named beside each call)."""
    p = {key: asked.get(key) for key in QUESTIONS}
    # Nova and Cinder's questions beside Neutron's: each service's first call pays its version discovery
    # and the token's validation (0.1-0.17 s on the ground, more on a real cloud), and the calls were 13
    # in a row. Two lines, not one per service: four made the ground's services answer slower than one.
    # A daemon thread, not an executor's: gpu-rent up asks this too, and Ctrl+C must end it at once even
    # when the network hangs (an executor's threads are waited for at exit).
    network: dict = {}

    def ask_network() -> None:
        try:
            network["found"] = {**_networks(conn, p), **_network_rest(conn, p)}
        except BaseException as e:  # raised in the caller's thread below
            network["error"] = e

    beside = threading.Thread(target=ask_network, daemon=True, name="lookup-network")
    beside.start()
    found = {**_compute(conn, p), **_storage(conn, p)}
    beside.join()
    if "error" in network:
        raise network["error"]
    found.update(network["found"])
    return found


def _compute(conn, p: dict) -> dict:
    compute = conn.compute
    flavors = {}
    for name in p["flavors"] or []:
        flavor = compute.find_flavor(name)  # compute_flavor_info
        flavors[name] = [flavor.to_dict(computed=False)] if flavor else []
    keypair = compute.find_keypair(p["keypair"]) if p["keypair"] else None  # keypair
    servers = []
    if p["server"]:  # server_info
        servers = [
            without_handoff(s.to_dict(computed=False) if hasattr(s, "to_dict") else s)
            for s in conn.search_servers(name_or_id=p["server"], detailed=False, all_projects=False)
            if s["status"] != "DELETED"  # listed a few seconds after a delete (rental_server_delete's gone)
        ]
    return {"flavors": flavors, "keypair": keypair.to_dict(computed=False) if keypair else None, "servers": servers}


# gpu_rent_killer_handoff.HANDOFF_KEY: the killer's credential, handed in the server's metadata until its VM
# holds it (tests/unit/test_vm_paths.py holds the copies equal)
HANDOFF_KEY = "gpu_rent_killer"


def without_handoff(server: dict) -> dict:
    """A server as a module returns it, without the secret handed in its metadata (module results are printed
    at -v and land in files up hands the playbook)."""
    metadata = server.get("metadata")
    if isinstance(metadata, dict) and HANDOFF_KEY in metadata:
        server = {**server, "metadata": {k: v for k, v in metadata.items() if k != HANDOFF_KEY}}
    return server


def _storage(conn, p: dict) -> dict:
    storage = conn.block_storage
    volumes = {name: [v.to_dict(computed=False) for v in storage.volumes(name=name)] for name in p["volumes"] or []}
    snapshots = []
    if p["snapshot"]:  # volume_snapshot_info
        snapshots = [s.to_dict(computed=False) for s in storage.snapshots(name=p["snapshot"])]
    return {"volumes": volumes, "volume_snapshots": snapshots}  # volume_info


def _networks(conn, p: dict) -> dict:
    # networks_info, as the network role asks it: by name, else the networks with router:external
    external = p["external_network"]
    found = conn.search_networks(name_or_id=external or None, filters=None if external else {"router:external": True})
    networks = {
        name: [n.to_dict(computed=False) for n in conn.search_networks(name_or_id=name)] for name in p["networks"] or []
    }
    subnets = {
        name: [s.to_dict(computed=False) for s in conn.network.subnets(name=name)] for name in p["subnets"] or []
    }
    routers = {
        name: [r.to_dict(computed=False) for r in conn.search_routers(name_or_id=name)] for name in p["routers"] or []
    }  # routers_info
    # the router module's own view of a router's interfaces (router.py _get_port_changes)
    interfaces = {
        r["id"]: [port.to_dict(computed=False) for port in conn.list_router_interfaces(r, "internal")]
        for named in routers.values()
        for r in named
    }
    return {
        "external_networks": [n.to_dict(computed=False) for n in found],
        "networks": networks,
        "subnets": subnets,
        "routers": routers,
        "router_interfaces": interfaces,
    }


def _network_rest(conn, p: dict) -> dict:
    network = conn.network
    groups = []
    if p["security_group"]:  # security_group_info, asking Neutron for the name instead of listing all
        groups = [g.to_dict(computed=False) for g in network.security_groups(name=p["security_group"])]
    ips = []
    if p["floating_ip_description"]:  # floating_ip_info
        ips = [ip.to_dict(computed=False) for ip in network.ips(description=p["floating_ip_description"])]
    return {"security_groups": groups, "floating_ips": ips}
