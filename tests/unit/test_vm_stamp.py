"""The stamp a VM role leaves and checks (plugins/modules/vm_stamp.py): when a warm run may skip its work."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.module_file import load

vm_stamp = load("vm_stamp", Path(__file__).resolve().parents[2] / "plugins" / "modules" / "vm_stamp.py")

INPUTS = {"role": "abc", "vars": {"swarmui_version": "0.9.8"}}


def recorded_for(files: dict, inputs=INPUTS, units=("swarmui.service",)) -> dict:
    return {"digest": vm_stamp.digest(inputs, list(files), list(units)), "files": files}


def test_fresh_when_inputs_files_and_units_are_as_recorded():
    recorded = recorded_for({"/a": "1", "/b": "2"})
    wanted = vm_stamp.digest(INPUTS, ["/b", "/a"], ["swarmui.service"])  # the order of the lists does not count
    assert vm_stamp.judge(recorded, wanted, {"/a": "1", "/b": "2"}, [], force=False) == ""


@pytest.mark.parametrize(
    ("recorded", "sums", "inactive", "force", "why"),
    [
        (None, {}, [], False, "no stamp of an earlier run"),
        ({"files": {}}, {}, [], False, "no stamp of an earlier run"),
        (recorded_for({"/a": "1"}), {"/a": "2"}, [], False, "/a changed"),
        (recorded_for({"/a": "1"}), {"/a": None}, [], False, "/a is missing"),
        (recorded_for({"/a": "1"}), {"/a": "1"}, ["swarmui.service"], False, "swarmui.service not active"),
        (recorded_for({"/a": "1"}), {"/a": "1"}, [], True, "asked to run whole"),
    ],
)
def test_stale_names_why(recorded, sums, inactive, force, why):
    wanted = vm_stamp.digest(INPUTS, ["/a"], ["swarmui.service"])
    assert vm_stamp.judge(recorded, wanted, sums, inactive, force=force) == why


def test_a_changed_input_or_a_file_newly_checked_makes_it_stale():
    recorded = recorded_for({"/a": "1"})
    changed_var = vm_stamp.digest({**INPUTS, "vars": {"swarmui_version": "0.9.9"}}, ["/a"], ["swarmui.service"])
    one_more_file = vm_stamp.digest(INPUTS, ["/a", "/c"], ["swarmui.service"])
    for wanted in (changed_var, one_more_file):
        assert vm_stamp.judge(recorded, wanted, {"/a": "1"}, [], force=False) == "its inputs or the role changed"


def test_the_record_is_whole_or_absent_and_root_only(tmp_path):
    path = tmp_path / "stamps" / "swarmui.json"
    vm_stamp.write(str(path), {"digest": "d", "files": {}})
    assert vm_stamp.read(str(path)) == {"digest": "d", "files": {}}
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert [p.name for p in path.parent.iterdir()] == ["swarmui.json"]  # no temp file left
    path.write_text("{half")
    assert vm_stamp.read(str(path)) is None  # a damaged stamp is no stamp: the role runs whole


def test_file_sums_follow_content(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"x" * 3_000_000)
    first = vm_stamp.file_sum(str(f))
    f.write_bytes(b"x" * 2_999_999 + b"y")
    assert vm_stamp.file_sum(str(f)) != first
    assert vm_stamp.file_sum(str(tmp_path / "absent")) is None


def test_a_file_that_must_be_absent_makes_it_stale_while_it_exists():
    """SwarmUI's must_rebuild: the launcher would rebuild (and fall back) behind the role's back."""
    recorded = {"digest": vm_stamp.digest(INPUTS, [], [], ["/opt/swarmui/src/bin/must_rebuild"]), "files": {}}
    wanted = vm_stamp.digest(INPUTS, [], [], ["/opt/swarmui/src/bin/must_rebuild"])
    assert vm_stamp.judge(recorded, wanted, {}, [], force=False) == ""
    assert vm_stamp.judge(recorded, wanted, {}, [], False, ["/opt/swarmui/src/bin/must_rebuild"]) == (
        "/opt/swarmui/src/bin/must_rebuild exists"
    )
