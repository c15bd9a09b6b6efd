"""What up sets on a server it brings back (plugins/modules/kept_server.py): by id, never a create."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.module_file import load

MODULES = Path(__file__).resolve().parents[2] / "plugins" / "modules"
module = load("kept_server", MODULES / "kept_server.py")


@pytest.mark.parametrize(
    ("have", "differ"),
    [
        (["gpu-rent", "preemptible"], False),
        (["preemptible", "gpu-rent"], False),  # Nova keeps no order
        (["gpu-rent"], True),  # a tool replaced the list: without "preemptible" the VM bills full price
        ([], True),
        (None, True),
    ],
)
def test_tags_are_put_back_only_when_they_differ(have, differ):
    assert module.tags_differ(have, ["gpu-rent", "preemptible"]) is differ


def test_metadata_keeps_other_keys_and_changes_only_what_differs():
    assert module.metadata_update({"gpu-rent": "p", "gpu_rent_killer": "x"}, {"gpu-rent": "p"}) == {}
    both = {"gpu_rent_killer": "x", "gpu-rent": "p"}
    assert module.metadata_update({"gpu_rent_killer": "x"}, {"gpu-rent": "p"}) == both
    assert module.metadata_update(None, {"gpu-rent": "p"}) == {"gpu-rent": "p"}


def test_it_creates_nothing():
    """The module's whole reach into the cloud: a find by id, a get, the tag PUT and the metadata set."""
    source = (MODULES / "kept_server.py").read_text()
    assert "create_server" not in source and "ignore_missing=True" in source and "No Server found for" in source
