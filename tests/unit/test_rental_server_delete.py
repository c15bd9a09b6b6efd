"""Which servers stop may delete (plugins/modules/rental_server_delete.py): gpu-rent's alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rent.rental import stop_head_start
from tests.module_file import load

MODULES = Path(__file__).resolve().parents[2] / "plugins" / "modules"
module = load("rental_server_delete", MODULES / "rental_server_delete.py")


@pytest.mark.parametrize(
    ("server", "ours"),
    [
        ({"tags": ["gpu-rent", "preemptible"], "metadata": {}}, True),
        ({"tags": None, "metadata": {"gpu-rent": "my-project"}}, True),  # a cloud without tags: the mark
        ({"tags": ["preemptible"], "metadata": {"gpu-rent": ""}}, False),  # an empty mark is no mark
        ({"tags": [], "metadata": None}, False),
        ({}, False),
    ],
)
def test_only_a_server_with_the_tag_or_the_mark_is_ours(server, ours):
    assert module.ours(server) is ours
    # stop's head start (the CLI's delete before the playbook's) goes by the same rule, on a Server resource
    resource = type("Server", (), {"tags": server.get("tags"), "metadata": server.get("metadata")})()
    assert stop_head_start.rented_by_gpu_rent(resource) is ours


@pytest.mark.parametrize(
    ("status", "gone"), [(None, True), ("DELETED", True), ("ACTIVE", False), ("SHUTOFF", False), ("ERROR", False)]
)
def test_a_server_is_gone_when_not_found_or_deleted_as_wait_for_delete_ends(status, gone):
    server = None if status is None else type("Server", (), {"status": status})()
    assert module.gone(server) is gone
