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
  - It changes nothing, but for I(warm_start). The roles still decide, check and create as before; what
    it found only spares them the lookup, and a role handed nothing looks up for itself.
  - With I(warm_start), when its answers show a warm restart - no server, and everything the roles
    check before the server's create there, one each, and as they want it (module_utils/gpu_rent_warm_start.py)
    - it asks Nova for the server from the two volumes as the first flavor, and takes the project's
    floating IP, before it returns; the build runs while the roles check, and the server role's
    fresh_server adopts it (created_early). Not in check mode.
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
  warm_start:
    description:
      - What a warm restart's server is created with besides the names above (I(server), the first of
        I(flavors), I(volumes) boot then data, the network of the volumes' pool from I(networks) in
        I(pools)' order, I(security_group), I(keypair)).
    type: dict
    suboptions:
      pools:
        description: The settings' pools, in the order of I(networks), I(subnets) and I(routers).
        type: list
        elements: str
        required: true
      public_key:
        description: The key pair's wanted public key (the keypair role replaces one that differs).
        type: str
        required: true
      tags: {description: Server tags., type: list, elements: str, default: []}
      metadata: {description: Server metadata., type: dict, default: {}}
      floating_ip:
        description: The project's floating IP (its description) to take before the create.
        type: dict
        suboptions:
          description: {description: Description that marks the address as the project's., type: str, required: true}
          keep: {description: KEEP_FLOATING_IP., type: bool, default: false}
      reuse_only: {description: Only an existing server may come back (the watchdog)., type: bool, default: false}
      killer:
        description:
          - "The idle-killer's credential name, days, rule_path: the create carries a credential for its build
            (module_utils/gpu_rent_killer_handoff.py CREATE_NOTES); null: none."
        type: dict
        suboptions:
          name: {description: The project folder's credential name., type: str, required: true}
          days: {description: Days the server's own credential lives (the create's lives one)., type: int, default: 7}
          rule_path: {description: "The server's own credential's rule path; the create's ends in *.", type: str}
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
early:
  description:
    - "With I(warm_start): created (bool), why (when not), and the server (without the secret it carries), its
      flavor, floating_ip (or floating_ip_error) and killer_at_create (the credential it carries, no secret) when
      created."
  returned: with warm_start
  type: dict
"""

from ansible_collections.openstack.cloud.plugins.module_utils.openstack import OpenStackModule

# As a collection's module, or (playbooks/library in a direct run) with playbooks/module_utils beside it.
try:
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_killer_handoff import (
        KILLER_OPTIONS as KILLER,
    )
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_killer_handoff import for_create
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_lookup import lookup
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_warm_start import WARM_START_OPTIONS, start
except ImportError:
    from ansible.module_utils.gpu_rent_killer_handoff import KILLER_OPTIONS as KILLER
    from ansible.module_utils.gpu_rent_killer_handoff import for_create
    from ansible.module_utils.gpu_rent_lookup import lookup
    from ansible.module_utils.gpu_rent_warm_start import WARM_START_OPTIONS, start


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
        warm_start=dict(type="dict", options={**WARM_START_OPTIONS, "killer": dict(type="dict", options=KILLER)}),
    )
    module_kwargs = dict(supports_check_mode=True)  # noqa: RUF012 - read by the base class

    def run(self):
        found = lookup(self.conn, self.params)
        if self.params["warm_start"]:
            found["early"] = (
                {"created": False, "why": "check mode"}
                if self.ansible.check_mode
                else start(self.conn, found, self.params, self.sdk.exceptions, self._carry())
            )
        self.exit_json(changed=bool(found.get("early", {}).get("created")), **found)

    def _carry(self):
        """What makes the killer's credential the early create carries (gpu_rent_killer_handoff CREATE_NOTES)."""
        p = self.params
        spec = p["warm_start"]["killer"]
        if not spec:
            return None
        return lambda floating_ip_id: for_create(self.conn, spec, p["region_name"], p["interface"], floating_ip_id)


def main():
    RentalLookupModule()()


if __name__ == "__main__":
    main()
