"""A module loaded from its file: the VM's programs, the collection's modules and the ground's scripts are
not packages, and a test imports them by path under a name no other test module can shadow."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
