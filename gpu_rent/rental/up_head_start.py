"""up's head start: the playbook's lookup asked by the CLI, and a warm restart's server asked for right after.

rental_lookup, up.yml's first cloud task, waits for ansible-playbook's start, then pays its own python start,
openstacksdk's import and a login before it asks anything: about 1.5 s on the test ground that a warm up's
server create waited for, while this process had done all of that for its plan. Here the same questions
(the collection's plugins/module_utils/gpu_rent_lookup.py) and the same warm start (gpu_rent_warm_start.py)
run on the CLI's connection, and the answer goes to up.yml in the module's JSON shape as a file
(`gpu_rent_up_found_file`) - never as an extra var, which ansible-core 2.19 renders as a trusted template,
the cloud's strings with it. A direct `ansible-playbook playbooks/up.yml` asks the module, as before.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path
from types import ModuleType

from gpu_rent.project.settings import Settings, resource_names
from gpu_rent.util.atomic import write_atomically
from gpu_rent.util.checkout import ROOT

MODULE_UTILS = ROOT / "plugins" / "module_utils"
# The server role's defaults (roles/server/defaults/main.yml) that a warm restart's server is created with;
# tests/unit/test_up_head_start.py renders up.yml's options with them and asserts these are the same.
SERVER_TAGS = ["gpu-rent", "preemptible"]


@cache
def _shared(name: str) -> ModuleType:
    """The collection's file, loaded by its path (an Ansible module_utils, not part of this package)."""
    path = MODULE_UTILS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"gpu_rent_collection_{name}", path)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def questions(settings: Settings, reuse_only: bool = False) -> dict:
    """rental_lookup's options as playbooks/up.yml gives them (an omitted one as None)."""
    names = resource_names(settings.name)
    pools = list(settings.pools())
    return {
        "flavors": list(settings.flavors()),
        "keypair": names["keypair"],
        "volumes": [names["boot_volume"], names["data_volume"]],
        "snapshot": names["snapshot"],
        "external_network": settings.external_network or None,
        "networks": [names["network_prefix"] + pool for pool in pools],
        "subnets": [names["subnet_prefix"] + pool for pool in pools],
        "routers": [names["router_prefix"] + pool for pool in pools],
        "security_group": names["security_group"],
        "server": names["server"],
        "floating_ip_description": names["floating_ip_description"],
        "warm_start": {
            "pools": pools,
            "public_key": settings.ssh_public_key().strip(),
            "tags": SERVER_TAGS,
            "metadata": {"gpu-rent": settings.name},
            "floating_ip": {"description": names["floating_ip_description"], "keep": settings.keep_floating_ip},
            "reuse_only": reuse_only,
            # the server role's server_killer: the create carries the killer's credential for the build
            "killer": {"name": names["idle_killer_credential"], "days": 7, "rule_path": None},
        },
    }


def ask(conn, asked: dict) -> dict:
    """The lookup's answers, as the module returns them (through JSON, as its answer travels)."""
    return json.loads(json.dumps(_shared("gpu_rent_lookup").lookup(conn, asked), default=str))


def start(conn, asked: dict, found: dict, handover: Path) -> dict:
    """The warm restart's server asked for when the answers allow it (the module's `early`), and the whole
    answer written to handover for up.yml."""
    # here, not at the top: status imports rental, which imports this module, and never loads the SDK itself
    from openstack import exceptions as sdk_exceptions

    def carry(floating_ip_id: str | None) -> tuple[dict, dict]:  # rental_lookup's _carry, on the CLI's login
        # the playbook's region (gpu_rent_cloud_auth.region_name) names the folder: never a per-service one
        region, interface = conn.config.region_name, conn.config.get_interface("compute")
        return _shared("gpu_rent_killer_handoff").for_create(
            conn, asked["warm_start"]["killer"], region, interface, floating_ip_id
        )

    early = _shared("gpu_rent_warm_start").start(conn, found, asked, sdk_exceptions, carry)
    found = {**found, "early": json.loads(json.dumps(early, default=str))}
    write_atomically(handover, json.dumps(found))
    return found
