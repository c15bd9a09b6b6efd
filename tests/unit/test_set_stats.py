"""The set_stats protocol (rental/set_stats.py): the roles send only its keys, and every key does something."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpu_rent.project.state import Phase, State
from gpu_rent.rental import set_stats, vm_end

REPO = Path(__file__).resolve().parents[2]


def _tasks(node):
    """Every task dict in a parsed tasks file or playbook, blocks and plays included."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _tasks(node.get(key) or [])


def sent_keys() -> dict[str, list[str]]:
    """{gpu_rent_* key: [files whose set_stats send it]} over every role and playbook."""
    found: dict[str, list[str]] = {}
    files = [*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("roles/*/handlers/*.yml"), *REPO.glob("playbooks/*.yml")]
    for path in files:
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            stats = task.get("ansible.builtin.set_stats") or task.get("set_stats")
            if isinstance(stats, dict):
                for key in stats.get("data") or {}:
                    found.setdefault(key, []).append(str(path.relative_to(REPO)))
    return found


def test_every_key_a_role_sends_is_one_of_the_protocols():
    sent = sent_keys()
    assert len(sent) >= 5, "the reader found no set_stats: it missed the roles' tasks"
    unknown = {key: files for key, files in sent.items() if key not in set_stats.KEYS}
    assert unknown == {}, "sent by set_stats but not in rental/set_stats.py, so the CLI never hears it"


def test_every_key_of_the_protocol_is_sent_by_a_role():
    assert sorted(set_stats.KEYS - set(sent_keys())) == []


def test_the_reader_sees_a_set_stats_key_in_a_block(tmp_path):
    play = [{"block": [{"ansible.builtin.set_stats": {"data": {"gpu_rent_x": 1}}}]}]
    found = [task for task in _tasks(play) if "ansible.builtin.set_stats" in task]
    assert found == [{"ansible.builtin.set_stats": {"data": {"gpu_rent_x": 1}}}]


EXAMPLES = {
    set_stats.RESOURCES: {"server": "s-1", "floating_ip": None},
    set_stats.DESTROYED: True,
    set_stats.FLAVOR: "gpu.l4",
    set_stats.POOL: "ru-7a",
    set_stats.GPU: {"report": "driver 580.65 on NVIDIA L4"},
    set_stats.DELETED_SERVERS: ["s-0"],
    set_stats.LAST_WORDS: {"deleted_at": 1_700_000_000, "reason": "idle"},
    set_stats.NOTE: "the next up makes a new boot volume",
    set_stats.KILLER_LOOKED: True,
    set_stats.PHASE: "provisioning",
    set_stats.UNGUARDED: "credential refused: Nova refused GET /v2.1/servers/s-1 (HTTP 401)",
}


def _outcome(data: dict, runtime: Path) -> tuple:
    state = State(resources={"floating_ip": "f-0", "network": "n-0"})
    said: list[str] = []
    looked = set_stats.apply(data, state, runtime_dir=runtime, playbook="up", say=said.append)
    end = runtime / vm_end.END_FILE
    return repr(state), said, looked, end.read_text() if end.exists() else None, set_stats.unguarded(data)


def test_the_examples_cover_every_key():
    assert set(EXAMPLES) == set(set_stats.KEYS)


@pytest.mark.parametrize("key", sorted(EXAMPLES))
def test_each_key_changes_the_state_says_something_or_reports_the_killer(key, tmp_path):
    nothing = _outcome({}, tmp_path / "a")
    assert _outcome({key: EXAMPLES[key]}, tmp_path / "b") != nothing, f"{key} is sent but does nothing"


def test_resources_name_ids_and_forget_the_gone():
    state = State(resources={"floating_ip": "f-0"})
    set_stats.apply({set_stats.RESOURCES: {"server": 7, "floating_ip": None}}, state, runtime_dir=Path("/nonexistent"),
                    playbook="up", say=print)  # fmt: skip
    assert state.resources == {"server": "7"}


def test_a_phase_the_state_cannot_take_is_said_not_raised(tmp_path):
    state, said = State(), []
    assert not set_stats.apply({set_stats.PHASE: "ready_tunneled"}, state, runtime_dir=tmp_path, playbook="up",
                               say=said.append)  # fmt: skip
    assert state.phase == Phase.IDLE and said and said[0].startswith("state: cannot go from idle")
