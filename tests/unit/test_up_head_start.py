"""The CLI asks up's lookup as playbooks/up.yml asks rental_lookup (rental/up_head_start.py), and hands it on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleValueOmittedError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from gpu_rent.cloud import view as cloud
from gpu_rent.project import settings as config
from gpu_rent.project.state import Scope, State, StateStore
from gpu_rent.rental import operations as rental_module
from gpu_rent.rental import up_head_start
from gpu_rent.rental.operations import Rental

REPO = Path(__file__).resolve().parents[2]
UP = REPO / "playbooks" / "up.yml"
SERVER_DEFAULTS = REPO / "roles" / "server" / "defaults" / "main.yml"
WARM_START = REPO / "roles" / "server" / "tasks" / "warm_start.yml"
AUTH = ("auth", "auth_type", "region_name", "interface")


def _trusted(value):
    """What the playbook's YAML holds is trusted as a template (as ansible-core trusts its own files)."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    return value


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def playbook_questions(settings: config.Settings, reuse_only: bool) -> dict:
    """The rental_lookup task's options, rendered with the project's variables, the server role's defaults,
    up.yml's play vars and warm_start.yml's fact (an omitted option as None)."""
    play = yaml.safe_load(UP.read_text())[0]
    task = next(t for t in play["pre_tasks"] if "rental_lookup" in t)
    variables = {**settings.ansible_vars(), "gpu_rent_reuse_only": reuse_only}
    variables.update(_trusted(yaml.safe_load(SERVER_DEFAULTS.read_text())))
    variables.update(_trusted(play["vars"]))
    variables["server_warm_floating_ip"] = trust_as_template("{{ up_floating_ip }}")
    fact = yaml.safe_load(WARM_START.read_text())[0]["ansible.builtin.set_fact"]["server_warm_start"]
    templar = Templar(loader=DataLoader(), variables=variables)
    variables["server_warm_start"] = templar.template(_trusted(fact))
    templar = Templar(loader=DataLoader(), variables=variables)
    rendered = {}
    for key, value in task["rental_lookup"].items():
        if key in AUTH:
            continue
        try:
            rendered[key] = _plain(templar.template(_trusted(value)))
        except AnsibleValueOmittedError:
            rendered[key] = None
    return rendered


@pytest.mark.parametrize("reuse_only", [False, True])
@pytest.mark.parametrize(
    "extra",
    [
        "",
        "POOL_FALLBACK=ru-7b,ru-9a\nFLAVOR_FALLBACK=gpu.l4.1\nEXTERNAL_NETWORK=ext-net\nNAME=lab\n"
        "KEEP_FLOATING_IP=true\n",
    ],
)
def test_the_cli_asks_what_the_playbook_asks(dead_cloud_project, extra, reuse_only):
    vars_file = dead_cloud_project / "gpu-rent.vars"
    vars_file.write_text(vars_file.read_text() + extra)
    settings = config.load(dead_cloud_project, with_cloud=False)
    assert playbook_questions(settings, reuse_only) == up_head_start.questions(settings, reuse_only)


def test_the_shared_calls_are_the_collections_files_and_know_every_question(dead_cloud_project):
    lookup = up_head_start._shared("gpu_rent_lookup")
    assert Path(lookup.__file__) == REPO / "plugins" / "module_utils" / "gpu_rent_lookup.py"
    settings = config.load(dead_cloud_project, with_cloud=False)
    asked = up_head_start.questions(settings)
    assert set(asked) - {"warm_start"} <= set(lookup.QUESTIONS)
    options = up_head_start._shared("gpu_rent_warm_start").WARM_START_OPTIONS
    # rental_lookup adds the killer's option, from the handoff's KILLER_OPTIONS
    assert set(asked["warm_start"]) == set(options) | {"killer"}
    killer = up_head_start._shared("gpu_rent_killer_handoff").KILLER_OPTIONS
    assert set(asked["warm_start"]["killer"]) == set(killer)


def test_the_answer_goes_to_the_playbook_as_a_file_with_why_no_server_was_asked_for(dead_cloud_project):
    settings = config.load(dead_cloud_project, with_cloud=False)
    asked = up_head_start.questions(settings)
    found = {"servers": [{"id": "s1", "name": "gpu-rent", "status": "SHUTOFF"}], "flavors": {}}
    handover = dead_cloud_project / ".gpu-rent" / "up-found.json"
    handover.parent.mkdir()
    up_head_start.start(None, asked, found, handover)  # no call: a server is there, nothing to ask Nova
    handed = json.loads(handover.read_text())
    assert handed["servers"] == found["servers"]
    assert handed["early"] == {"created": False, "why": "a server of this name exists"}
    assert handover.stat().st_mode & 0o777 == 0o600


def test_the_early_server_and_its_address_are_in_the_state_before_the_playbook_runs(dead_cloud_project):
    """Should the playbook never get as far as recording them, stop and status still name what bills."""
    settings = config.load(dead_cloud_project, with_cloud=False)
    rental = Rental(settings, say=lambda _: None, progress=lambda _: None)
    state = State()
    rental._record_early(state, {"created": False, "why": "a volume is not available"})
    assert state.resources == {}
    early = {"created": True, "server": {"id": "s1"}, "floating_ip": {"id": "f1", "floating_ip_address": "10.1.2.3"}}
    rental._record_early(state, early)
    recorded = {"server": "s1", "floating_ip": "f1", "floating_ip_address": "10.1.2.3"}
    assert state.resources == recorded
    assert StateStore(dead_cloud_project).load().resources == recorded


@pytest.mark.parametrize(("answer_seconds", "lookups"), [(0.0, 1), (rental_module.LOOKUP_FRESH_SECONDS + 1, 2)])
def test_a_lookup_older_than_a_persons_answer_is_asked_again_before_the_create(
    dead_cloud_project, monkeypatch, answer_seconds, lookups
):
    """--yes answers at once and the lookup beside the plan stands; a person's answer takes seconds, and the
    head start creates from a lookup asked after it."""
    clock = [1000.0]
    monkeypatch.setattr(rental_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(rental_module, "connect", lambda settings: "conn")
    monkeypatch.setattr(rental_module, "scope_of", lambda conn: Scope("p", "RegionOne"))
    monkeypatch.setattr(rental_module.cloud, "observe", lambda conn, name: cloud.CloudView())
    monkeypatch.setattr(rental_module, "plan", lambda *a: [rental_module.PlanItem("server", "s", "create")])
    asked = []
    monkeypatch.setattr(up_head_start, "ask", lambda conn, questions: asked.append(clock[0]) or {"n": len(asked)})
    started = []
    monkeypatch.setattr(
        up_head_start, "start", lambda conn, q, found, handover: started.append(found) or {**found, "early": {}}
    )

    def confirm(items) -> bool:
        clock[0] += answer_seconds
        return True

    settings = config.load(dead_cloud_project, with_cloud=False)
    rental = Rental(settings, say=lambda _: None, progress=lambda _: None)
    monkeypatch.setattr(rental, "_run", lambda state, playbook, title, extra: "ran")
    assert rental.up(confirm)[1] == "ran"
    assert len(asked) == lookups and started == [{"n": lookups}]
