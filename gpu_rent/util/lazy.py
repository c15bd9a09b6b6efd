"""Modules loaded on first use: `status` and `doctor` never need SSH, the tunnel or ansible-runner,
and a command's start-up time is most of what a quick look costs."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy(name: str) -> ModuleType:
    """The module NAME, executed the first time one of its attributes is read."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
