"""stop's head start (gpu_rent/rental/stop_head_start.py): which recorded server the CLI asks Nova to delete."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from openstack import exceptions as sdk_exceptions

from gpu_rent.rental import stop_head_start

ID = "0a1b2c3d-0000-4000-8000-000000000001"


class Compute:
    """Nova's answers to find_server and delete_server: what the head start asks, and what it deleted."""

    def __init__(self, server=None, refuse: Exception | None = None):
        self.server, self.refuse, self.deleted = server, refuse, []

    def find_server(self, name_or_id, ignore_missing=True):
        assert ignore_missing
        return self.server if self.server is not None and name_or_id == self.server.id else None

    def delete_server(self, server_id):
        if self.refuse:
            raise self.refuse
        self.deleted.append(server_id)


def server(**kw) -> SimpleNamespace:
    fields = {"id": ID, "name": "proj", "status": "ACTIVE", "tags": ["gpu-rent"], "metadata": {}} | kw
    return SimpleNamespace(**fields)


def test_the_recorded_server_of_the_projects_name_is_deleted():
    compute = Compute(server())
    assert stop_head_start.ask_for_delete(SimpleNamespace(compute=compute), ID, "proj") is True
    assert compute.deleted == [ID]


def test_a_cloud_without_tags_marks_the_server_in_its_metadata():
    compute = Compute(server(tags=[], metadata={"gpu-rent": "proj"}))
    assert stop_head_start.ask_for_delete(SimpleNamespace(compute=compute), ID, "proj") is True


@pytest.mark.parametrize(
    ("found", "why"),
    [
        (None, "gone already: nothing to ask"),
        (server(name="other"), "another project's name: a copied folder's state"),
        (server(tags=["preemptible"], metadata={}), "not gpu-rent's: the playbook refuses it in words"),
        (server(status="DELETED"), "Nova is done with it"),
    ],
)
def test_anything_else_is_left_to_the_playbook(found, why):
    compute = Compute(found)
    assert stop_head_start.ask_for_delete(SimpleNamespace(compute=compute), ID, "proj") is False, why
    assert compute.deleted == []


def test_novas_refusal_is_left_to_the_playbook_to_say():
    compute = Compute(server(), refuse=sdk_exceptions.ConflictException("locked"))
    assert stop_head_start.ask_for_delete(SimpleNamespace(compute=compute), ID, "proj") is False
