"""A server no idle-killer guards is said so: by up when it ends early, by status while the killer is armed for
the VM before (its config came with the reused boot volume)."""

from __future__ import annotations

import pytest

from gpu_rent.cloud import view as cloud
from gpu_rent.project import settings as config
from gpu_rent.project.state import Scope, State
from gpu_rent.rental import operations as rental_module
from gpu_rent.rental import up_head_start
from gpu_rent.rental.operations import OperationFailed, Rental
from gpu_rent.rental.plan import unguarded
from gpu_rent.to_vm.killer_view import describe

NOW = 1_800_000_000.0
ARMED = {"server_id": "old", "tick_at": NOW - 20, "action": "keep", "reason": "grace after boot, 44 min left",
         "fires_at": None, "credential": {"state": "ok"}}  # fmt: skip


def test_status_says_a_killer_armed_for_the_vm_before_guards_nothing_here():
    line = describe(ARMED, NOW, "new")
    assert line.startswith("NOT ARMED for this server: it is still armed for old, the VM before this one")
    assert describe(ARMED, NOW, "old") == "armed, kept alive by: grace after boot, 44 min left"
    assert describe(ARMED, NOW) == describe(ARMED, NOW, "old")  # no server known: the report as it is
    assert describe({**ARMED, "server_id": None}, NOW, "new").startswith("armed")  # an old report without the id


@pytest.mark.parametrize(
    ("created", "armed", "server", "said"),
    [(True, False, "s1", True), (True, True, "s1", False), (False, False, "s1", False), (True, False, None, False),
     (True, False, "s0", False)],
    ids=["created-unarmed", "created-armed", "found-not-created", "nothing-created-yet", "only-the-vm-before"],
)  # fmt: skip
def test_up_names_a_server_it_created_and_left_without_a_killer(created, armed, server, said):
    """s0: the VM before (the idle-killer deleted it overnight), still in the state when this up failed before
    its create: nothing bills, nothing is said."""
    state = State(resources={"server": server} if server else {})
    warning = unguarded(state, "proj-vm", created=created, armed=armed, before="s0")
    assert (warning is not None) == said
    if said:
        assert warning.startswith("server proj-vm bills by the hour and no idle-killer is armed on it yet")


@pytest.mark.parametrize("armed", [False, True])
def test_an_up_that_fails_after_the_create_says_so_in_its_one_line(dead_cloud_project, monkeypatch, armed):
    monkeypatch.setattr(rental_module, "connect", lambda settings: "conn")
    monkeypatch.setattr(rental_module, "scope_of", lambda conn: Scope("p", "RegionOne"))
    monkeypatch.setattr(rental_module.cloud, "observe", lambda conn, name: cloud.CloudView())
    monkeypatch.setattr(rental_module, "plan", lambda *a: [rental_module.PlanItem("server", "s", "create")])
    monkeypatch.setattr(up_head_start, "ask", lambda conn, questions: {})
    early = {"created": True, "server": {"id": "s1"}, "floating_ip": {"id": "f1", "floating_ip_address": "10.1.2.3"}}
    monkeypatch.setattr(up_head_start, "start", lambda conn, q, found, handover: {"early": early})
    settings = config.load(dead_cloud_project, with_cloud=False)
    rental = Rental(settings, say=lambda _: None, progress=lambda _: None)

    def run(state, playbook, title, extra):
        rental.killer_armed = armed
        raise OperationFailed("up: the VM does not answer over SSH", canceled=True)

    monkeypatch.setattr(rental, "_run", run)
    with pytest.raises(OperationFailed) as failed:
        rental.up(lambda items: True)
    assert failed.value.canceled is True
    assert str(failed.value).startswith("up: the VM does not answer over SSH")
    assert ("no idle-killer is armed on it yet" in str(failed.value)) == (not armed)
    assert "\n" not in str(failed.value)


@pytest.mark.parametrize("made", [True, False], ids=["made-by-this-up", "there-before"])
def test_a_server_whose_killer_proof_is_refused_is_deleted_when_up_made_it_and_named_in_red_otherwise(
    dead_cloud_project, monkeypatch, made
):
    """The killer's arm proved (a GET of its server through Nova) that it cannot delete the server: the cause
    is the cloud's configuration, which no later tick mends. A server this up made is deleted, its volumes
    kept; one that was there before (perhaps working) is kept, and up fails saying it bills unguarded."""
    monkeypatch.setattr(rental_module, "connect", lambda settings: "conn")
    monkeypatch.setattr(rental_module, "scope_of", lambda conn: Scope("p", "RegionOne"))
    monkeypatch.setattr(rental_module.cloud, "observe", lambda conn, name: cloud.CloudView())
    action = "create" if made else "reuse"
    monkeypatch.setattr(rental_module, "plan", lambda *a: [rental_module.PlanItem("server", "s", action)])
    monkeypatch.setattr(up_head_start, "ask", lambda conn, questions: {})
    early = {"created": made, "server": {"id": "s1"}, "floating_ip": {"id": "f1", "floating_ip_address": "10.1.2.3"}}
    monkeypatch.setattr(up_head_start, "start", lambda conn, q, found, handover: {"early": early})
    settings = config.load(dead_cloud_project, with_cloud=False)
    rental = Rental(settings, say=lambda _: None, progress=lambda _: None)
    ran: list[str] = []
    cause = "credential refused: Nova refused GET /v2.1/servers/s1 (HTTP 401): its access rule does not match"

    def run(state, playbook, title, extra=None):
        ran.append(playbook)
        if playbook == "up":
            state.resources["server"] = "s1"
            rental.unguarded = cause  # as the idle_killer role's set_stats tells it, just before its fail
            raise OperationFailed("up: the idle-killer cannot delete this VM")
        state.resources.pop("server", None)  # the stop playbook deleted it, the volumes stay

    monkeypatch.setattr(rental, "_run", run)
    with pytest.raises(OperationFailed) as failed:
        rental.up(lambda items: True)
    said = str(failed.value)
    assert "\n" not in said and cause in said
    if made:
        assert ran == ["up", "stop"] and "So up deleted it (the volumes stay, nothing bills but the disks)" in said
        end = rental_module.vm_end.read(settings.runtime_dir, rental_module.vm_end.END_FILE)
        assert end["by"] == "gpu-rent up" and end["server_id"] == "s1" and cause in end["reason"]
        assert rental.store.load().phase == "idle"
    else:
        assert ran == ["up"] and "it bills until `gpu-rent stop`" in said
