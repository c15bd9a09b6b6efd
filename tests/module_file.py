"""A module loaded from its file: the VM's programs, the collection's modules and the ground's scripts are
not packages, and a test imports them by path under a name no other test module can shadow."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

MODULE_UTILS = Path(__file__).resolve().parents[1] / "plugins" / "module_utils"


def load(name: str, path: Path) -> ModuleType:
    # the collection's module_utils, importable as a direct run finds them (playbooks/module_utils)
    for util in sorted(MODULE_UTILS.glob("*.py")):
        if f"ansible.module_utils.{util.stem}" not in sys.modules:
            _exec(f"ansible.module_utils.{util.stem}", util)
    return _exec(name, path)


def _exec(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    if name.startswith("ansible.module_utils."):
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
