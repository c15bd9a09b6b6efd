"""The set_stats protocol: every `gpu_rent_*` key a playbook may send the wrapper, and what each does.

A role tells the CLI what happened through `ansible.builtin.set_stats` (per_host: false). ansible-runner
hands each report to `apply` while the play still runs (rental/runner.py), so an id reaches the state file
the moment a role has it, and an interrupted run never leaves a resource the next command cannot name.
tests/unit/test_set_stats.py holds the roles to these keys and every key to an effect.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gpu_rent.project.state import State, StateError
from gpu_rent.rental import vm_end

RESOURCES = "gpu_rent_resources"  # {name: id}: the state names the id at once; None: the resource is gone
DESTROYED = "gpu_rent_destroyed"  # true: destroy deleted everything the state named
FLAVOR = "gpu_rent_flavor"  # the flavor the server was made with (FLAVOR or a fallback)
POOL = "gpu_rent_pool"  # the pool the server and its volumes are in (POOL or a fallback)
GPU = "gpu_rent_gpu"  # bootstrap's look at the GPU: {"report": ...}
DELETED_SERVERS = "gpu_rent_deleted_servers"  # ids stop or destroy deleted: what status says once they are gone
LAST_WORDS = "gpu_rent_last_words"  # why the killer of the VM before this one deleted it
NOTE = "gpu_rent_note"  # a role's word to the user, e.g. what happens at the next up
KILLER_LOOKED = "gpu_rent_killer_looked"  # true: the idle-killer is armed and has taken its first look
PHASE = "gpu_rent_phase"  # where the playbook got: SSH answers, SwarmUI ready
UNGUARDED = "gpu_rent_unguarded"  # why the VM's idle-killer cannot delete it (its proof refused): up acts on it

KEYS = frozenset(
    {RESOURCES, DESTROYED, FLAVOR, POOL, GPU, DELETED_SERVERS, LAST_WORDS, NOTE, KILLER_LOOKED, PHASE, UNGUARDED}
)
_PHASE_REASONS = {"bootstrapping": "SSH answers", "ready_cloud": "SwarmUI answers with a running backend"}


def apply(data: dict, state: State, *, runtime_dir: Path, playbook: str, say: Callable[[str], None]) -> bool:
    """Change `state` as one report asks and tell the user what it says; True when the idle-killer has looked.

    Never raises a state error: this runs inside ansible-runner's event loop, where an exception would
    orphan the play."""
    for key, value in (data.get(RESOURCES) or {}).items():
        if value is None:
            state.resources.pop(key, None)
        else:
            state.resources[key] = str(value)
    if data.get(DESTROYED):
        state.resources.clear()
    if data.get(FLAVOR):
        state.flavor = data[FLAVOR]
    if data.get(POOL):
        state.pool = data[POOL]
    if isinstance(data.get(GPU), dict):
        state.gpu = str(data[GPU].get("report") or "") or None
    for server in data.get(DELETED_SERVERS) or ():
        vm_end.write(runtime_dir, vm_end.END_FILE, vm_end.stopped(server, time.time(), playbook))
    if isinstance(data.get(LAST_WORDS), dict):
        end = vm_end.from_last_words(data[LAST_WORDS])
        vm_end.write(runtime_dir, vm_end.END_FILE, end)
        say(f"the VM before this one was {vm_end.line(end)}")
    if data.get(NOTE):
        say(str(data[NOTE]))
    phase = data.get(PHASE)
    if phase:
        try:
            state.move_to(phase, _PHASE_REASONS.get(phase, playbook))
        except StateError as e:
            say(f"state: {e}; kept {state.phase}")
    return bool(data.get(KILLER_LOOKED))


def unguarded(data: dict) -> str | None:
    """Why nothing on the VM can delete it, when a report says so: the caller decides what to do with a
    server no killer guards (Rental.up deletes one it made), so it is not said here."""
    said = data.get(UNGUARDED)
    return str(said) if said else None
