"""up's lookup, asked by the CLI and handed to playbooks/up.yml as `up_lookup`.

The questions and the calls are the collection's (plugins/module_utils/gpu_rent_lookup.py, which the
rental_lookup module asks in a direct run); this process asks them with the connection it already has,
which spares a warm up the module's start, login and service discovery.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path
from types import ModuleType

from gpu_rent.config import Settings, resource_names

SHARED = Path(__file__).resolve().parents[1] / "plugins" / "module_utils" / "gpu_rent_lookup.py"


@cache
def _shared() -> ModuleType:
    """The collection's file, loaded by its path (it is an Ansible module_utils, not part of this package)."""
    spec = importlib.util.spec_from_file_location("gpu_rent_collection_lookup", SHARED)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(str(SHARED))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def questions(settings: Settings) -> dict:
    """rental_lookup's options as playbooks/up.yml gives them (gpu_rent_flavors, gpu_rent_names, the pools)."""
    names = resource_names(settings.name)
    pools = settings.pools()
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
    }


def ask(conn, settings: Settings) -> dict:
    """The answers as the module would return them: through JSON, as its answer travels."""
    return json.loads(json.dumps(_shared().lookup(conn, questions(settings)), default=str))
