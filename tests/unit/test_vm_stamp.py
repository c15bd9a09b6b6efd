"""The stamp a VM role leaves and checks (plugins/modules/vm_stamp.py, its logic in
plugins/module_utils/gpu_rent_stamp.py): when a warm run may skip its work."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.module_file import load

ROOT = Path(__file__).resolve().parents[2]
load("vm_stamp", ROOT / "plugins" / "modules" / "vm_stamp.py")  # the module imports its logic as a direct run does
vm_stamp = sys.modules["ansible.module_utils.gpu_rent_stamp"]

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


def spec_in(folder: Path, files: list[str], **more) -> dict:
    return {"name": "role", "inputs": "digest-of-the-vars", "files": files, "units": [], "absent": [],
            "force": False, "dir": str(folder / "stamps"), **more}  # fmt: skip


def test_check_after_record_is_fresh_until_a_file_or_the_inputs_change(tmp_path):
    made = tmp_path / "made.conf"
    made.write_text("as the role left it\n")
    spec = spec_in(tmp_path, [str(made)])
    assert vm_stamp.check(spec, lambda: "/bin/false") == {"fresh": False, "why": "no stamp of an earlier run"}
    vm_stamp.record(spec)
    assert vm_stamp.check(spec, lambda: "/bin/false") == {"fresh": True, "why": ""}
    assert (
        vm_stamp.check({**spec, "inputs": "another"}, lambda: "/bin/false")["why"] == "its inputs or the role changed"
    )
    made.write_text("edited\n")
    assert vm_stamp.check(spec, lambda: "/bin/false")["why"] == f"{made} changed"


class Probe:
    """What a probe module hands gpu_rent_stamp.checked: its params and get_bin_path."""

    def __init__(self, stamp):
        self.params = {"stamp": stamp}

    def get_bin_path(self, name, required=False):
        return "/bin/false"


def test_a_probe_answers_for_the_stamp_it_was_given_and_for_none_without(tmp_path):
    spec = spec_in(tmp_path, [])
    vm_stamp.record(spec)
    assert vm_stamp.checked(Probe(spec)) == {"stamp": {"fresh": True, "why": ""}}
    assert vm_stamp.checked(Probe({**spec, "force": True})) == {"stamp": {"fresh": False, "why": "asked to run whole"}}
    assert vm_stamp.checked(Probe(None)) == {}


def test_the_probes_take_the_stamp_as_vm_stamp_does():
    modules = ROOT / "plugins" / "modules"
    for name in ("bootstrap_probe", "swarmui_probe"):
        text = (modules / f"{name}.py").read_text()
        assert '"stamp": {"type": "dict", "options": STAMP_OPTIONS}' in text, name
        assert "**checked(module)" in text, name
