#!/usr/bin/python
"""Ansible module: what earlier ups left in the cloud, looked up in one login for the roles of up."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rental_lookup
short_description: Look up a rental's flavors, key pair, volumes, snapshot, networks, router, server and address at once
description:
  - Every openstack.cloud task is a process of its own that imports openstacksdk and logs in to
    Keystone, about a second each before it asks anything; a warm up used ten of them only to look.
    This module asks the same questions in one process and returns the answers in the very shapes
    the openstack.cloud info modules return (compute_flavor_info, volume_info,
    volume_snapshot_info, networks_info, subnets_info, routers_info, security_group_info,
    server_info, floating_ip_info, keypair), so the roles use either.
  - It changes nothing. The roles still decide, check and create as before; what it found only
    spares them the lookup, and a role handed nothing looks up for itself.
options:
  flavors: {description: Flavor names or ids (compute_flavor_info name)., type: list, elements: str, default: []}
  keypair: {description: Key pair name., type: str}
  volumes: {description: Volume names (volume_info name)., type: list, elements: str, default: []}
  snapshot: {description: Volume snapshot name (volume_snapshot_info name)., type: str}
  external_network:
    description: External network name; empty takes every network with router:external (networks_info).
    type: str
  networks: {description: Network names (networks_info name)., type: list, elements: str, default: []}
  subnets: {description: Subnet names (subnets_info name)., type: list, elements: str, default: []}
  routers: {description: Router names (routers_info name)., type: list, elements: str, default: []}
  security_group: {description: Security group name (security_group_info name)., type: str}
  server: {description: Server name (server_info name)., type: str}
  floating_ip_description:
    description: Floating IPs of this description, the project's mark (floating_ip_info description).
    type: str
extends_documentation_fragment:
  - openstack.cloud.openstack
"""

RETURN = r"""
flavors: {description: "Per flavor: the flavors found (compute_flavor_info's list).", returned: always, type: dict}
keypair: {description: The key pair, or null., returned: always, type: dict}
volumes: {description: "Per volume name: the volumes found (volume_info's list).", returned: always, type: dict}
volume_snapshots: {description: The snapshots of that name (volume_snapshot_info's list)., returned: always, type: list}
external_networks: {description: The external networks found (networks_info's list)., returned: always, type: list}
networks: {description: "Per network name: the networks found (networks_info's list).", returned: always, type: dict}
subnets: {description: "Per subnet name: the subnets found (subnets_info's list).", returned: always, type: dict}
routers: {description: "Per router name: the routers found (routers_info's list).", returned: always, type: dict}
router_interfaces:
  description: "Per router id found: its internal interface ports (port_info's shape), as the router module lists them."
  returned: always
  type: dict
security_groups: {description: The security groups of that name (security_group_info's list)., returned: always,
                  type: list}
servers: {description: "The servers of that name (server_info's list), but for DELETED ones.", returned: always,
          type: list}
floating_ips: {description: The floating IPs of that description (floating_ip_info's list)., returned: always,
               type: list}
"""

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.openstack.cloud.plugins.module_utils.openstack import OpenStackModule


class RentalLookupModule(OpenStackModule):
    argument_spec = dict(  # noqa: RUF012 - the base class reads it as a class attribute
        flavors=dict(type="list", elements="str", default=[]),
        keypair=dict(no_log=False),
        volumes=dict(type="list", elements="str", default=[]),
        snapshot=dict(),
        external_network=dict(),
        networks=dict(type="list", elements="str", default=[]),
        subnets=dict(type="list", elements="str", default=[]),
        routers=dict(type="list", elements="str", default=[]),
        security_group=dict(),
        server=dict(),
        floating_ip_description=dict(),
    )
    module_kwargs = dict(supports_check_mode=True)  # noqa: RUF012 - read by the base class

    def run(self):
        # Nova and Cinder's questions beside Neutron's: each service's first call pays its version discovery
        # and the token's validation (0.1-0.17 s on the ground, more on a real cloud), and the calls were 13
        # in a row. Two lines, not one per service: four made the ground's services answer slower than one.
        with ThreadPoolExecutor(max_workers=1) as beside:
            network = beside.submit(lambda: {**self._networks(), **self._network_rest()})
            found = {**self._compute(), **self._storage()}
            found.update(network.result())
        self.exit_json(changed=False, **found)

    # each call as the info module of the same question makes it (named beside it)
    def _compute(self) -> dict:
        p = self.params
        compute = self.conn.compute
        flavors = {}
        for name in p["flavors"]:
            flavor = compute.find_flavor(name)  # compute_flavor_info
            flavors[name] = [flavor.to_dict(computed=False)] if flavor else []
        keypair = compute.find_keypair(p["keypair"]) if p["keypair"] else None  # keypair
        servers = []
        if p["server"]:  # server_info
            servers = [
                s.to_dict(computed=False) if hasattr(s, "to_dict") else s
                for s in self.conn.search_servers(name_or_id=p["server"], detailed=False, all_projects=False)
                if s["status"] != "DELETED"  # listed a few seconds after a delete (rental_server_delete's gone)
            ]
        return {"flavors": flavors, "keypair": keypair.to_dict(computed=False) if keypair else None, "servers": servers}

    def _storage(self) -> dict:
        p = self.params
        storage = self.conn.block_storage
        volumes = {name: [v.to_dict(computed=False) for v in storage.volumes(name=name)] for name in p["volumes"]}
        snapshots = []
        if p["snapshot"]:  # volume_snapshot_info
            snapshots = [s.to_dict(computed=False) for s in storage.snapshots(name=p["snapshot"])]
        return {"volumes": volumes, "volume_snapshots": snapshots}  # volume_info

    def _networks(self) -> dict:
        p = self.params
        conn = self.conn
        # networks_info, as the network role asks it: by name, else the networks with router:external
        external = p["external_network"]
        found = conn.search_networks(
            name_or_id=external or None, filters=None if external else {"router:external": True}
        )
        networks = {
            name: [n.to_dict(computed=False) for n in conn.search_networks(name_or_id=name)] for name in p["networks"]
        }
        subnets = {name: [s.to_dict(computed=False) for s in conn.network.subnets(name=name)] for name in p["subnets"]}
        routers = {
            name: [r.to_dict(computed=False) for r in conn.search_routers(name_or_id=name)] for name in p["routers"]
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

    def _network_rest(self) -> dict:
        p = self.params
        network = self.conn.network
        groups = []
        if p["security_group"]:  # security_group_info, asking Neutron for the name instead of listing all
            groups = [g.to_dict(computed=False) for g in network.security_groups(name=p["security_group"])]
        ips = []
        if p["floating_ip_description"]:  # floating_ip_info
            ips = [ip.to_dict(computed=False) for ip in network.ips(description=p["floating_ip_description"])]
        return {"security_groups": groups, "floating_ips": ips}


def main():
    RentalLookupModule()()


if __name__ == "__main__":
    main()
