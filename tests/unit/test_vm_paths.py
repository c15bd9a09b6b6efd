"""A path on the VM is written once, in gpu_rent/on_vm/paths.py (design/layout.md rule 8).

Python imports it, the laptop's code and the VM's alike; YAML cannot, so each role default, role var and
playbook var that repeats one is listed here and held to the value paths.py gives. Both directions are
checked: a YAML value naming a path under one of the VM's folders must be in the list (a new copy is
not missed), and a string literal naming one in any other Python file of gpu_rent/ or of the roles'
files/ fails (it imports paths instead).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from gpu_rent.on_vm import paths
from tests.module_file import load
from tests.source import string_literals

ROOT = Path(__file__).resolve().parents[2]
# The VM's folders gpu-rent names; any path under them is one of paths.py's, or one of a role's own files.
FOLDERS = (paths.PROGRAM_DIR, paths.RUN_DIR, paths.STATE_DIR, paths.DATA_MOUNT, os.path.dirname(paths.CONFIG_FILE))
# One of them anywhere in a string, as a whole path part (/run/gpu-rent-other is not /run/gpu-rent).
NAMED = re.compile("|".join(rf"(?<![\w.-]){re.escape(folder)}(?![\w.-])" for folder in FOLDERS))
# Every YAML copy: (file, key path) -> the value paths.py makes of it. A Jinja value names it as its default('...').
COPIES = {
    ("roles/idle_killer/defaults/main.yml", "idle_killer_program_dir"): paths.PROGRAM_DIR,
    ("roles/idle_killer/defaults/main.yml", "idle_killer_status_file"): paths.STATUS_FILE,
    ("roles/idle_killer/defaults/main.yml", "idle_killer_seeding_lock"): paths.SEEDING_LOCK,
    ("roles/idle_killer/defaults/main.yml", "idle_killer_last_words_file"): paths.LAST_WORDS_FILE,
    ("roles/idle_killer/defaults/main.yml", "idle_killer_memory_file"): paths.MEMORY_FILE,
    ("roles/idle_killer/defaults/main.yml", "idle_killer_config_file"): paths.CONFIG_FILE,
    ("roles/idle_killer/defaults/main.yml", "idle_killer_data_mount"): paths.DATA_MOUNT,
    ("roles/idle_killer/defaults/main.yml", "idle_killer_hold_file"): paths.HOLD_FILE,
    ("roles/seed/defaults/main.yml", "seed_program_dir"): paths.PROGRAM_DIR,
    ("roles/seed/defaults/main.yml", "seed_lock_file"): paths.SEEDING_LOCK,
    ("roles/seed/defaults/main.yml", "seed_progress_file"): paths.PROGRESS_FILE,
    ("roles/llm_runtime/defaults/main.yml", "llm_runtime_program_dir"): paths.PROGRAM_DIR,
    ("roles/llm_runtime/defaults/main.yml", "llm_runtime_lock_file"): paths.SEEDING_LOCK,
    ("roles/llm_runtime/defaults/main.yml", "llm_runtime_progress_file"): paths.PROGRESS_FILE,
    ("roles/llm_runtime/defaults/main.yml", "llm_runtime_data_volume_mount"): paths.DATA_MOUNT,
    ("roles/data_volume/defaults/main.yml", "data_volume_mount_point"): paths.DATA_MOUNT,
    ("roles/data_volume/meta/argument_specs.yml", "argument_specs.main.options.data_volume_mount_point.default"):
        paths.DATA_MOUNT,
    ("roles/data_volume/vars/main.yml", "data_volume_grow_program"): f"{paths.PROGRAM_DIR}/grow-data-volume",
    ("roles/swarmui/defaults/main.yml", "swarmui_data_volume_mount"): paths.DATA_MOUNT,
    ("roles/swarmui/vars/main.yml", "swarmui_program_dir"): paths.PROGRAM_DIR,
    ("roles/swarmui/vars/main.yml", "swarmui_restart_due_file"): paths.SWARMUI_RESTART_DUE,
    ("playbooks/hold.yml", "1.vars.hold_file"): paths.HOLD_FILE,
}  # fmt: skip
YAML_FILES = (
    "roles/*/defaults/main.yml",
    "roles/*/vars/main.yml",
    "roles/*/meta/argument_specs.yml",
    "roles/*/tasks/*.yml",
    "roles/*/handlers/*.yml",
    "playbooks/*.yml",
)
# An Ansible module runs on the VM without gpu_rent (Ansible ships module_utils alone): the one VM path the
# plugins may write (vm_stamp's default, in its code and its documentation) is held to paths.py here.
PLUGIN_PATHS = {f"{paths.STATE_DIR}/stamps"}
PATH_TOKEN = re.compile(rf"(?:{NAMED.pattern})[\w./-]*")


def strings(node: object, where: tuple[str, ...] = ()):
    """(key path, value) of every string in a YAML document; a list's items keyed by their index."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from strings(value, (*where, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from strings(value, (*where, str(index)))
    elif isinstance(node, str):
        yield ".".join(where), node


def names_a_folder(value: str) -> bool:
    """A path under one of FOLDERS anywhere in the value: as it is, in a command line, or as a Jinja default."""
    return NAMED.search(value) is not None


def yaml_copies(root: Path) -> dict[tuple[str, str], str]:
    found = {}
    for path in sorted(p for pattern in YAML_FILES for p in root.glob(pattern)):
        for key, value in strings(yaml.safe_load(path.read_text())):
            if names_a_folder(value) and not key.endswith("description"):  # prose may name a folder
                found[(str(path.relative_to(root)), key)] = value
    return found


def the_same(value: str, expected: str) -> bool:
    return value == expected or (value.startswith("{{") and f"default('{expected}')" in value)


def test_every_yaml_copy_of_a_vm_path_is_the_one_paths_py_gives():
    found = yaml_copies(ROOT)
    unlisted = sorted(set(found) - set(COPIES))
    assert not unlisted, f"a VM path in YAML that tests/unit/test_vm_paths.py does not hold to paths.py: {unlisted}"
    assert sorted(set(COPIES) - set(found)) == [], "a listed copy is gone or no longer names a VM folder"
    wrong = {
        where: (found[where], expected) for where, expected in COPIES.items() if not the_same(found[where], expected)
    }
    assert wrong == {}, f"(what the YAML says, what paths.py says): {wrong}"


def literals(path: Path) -> list[tuple[int, str]]:
    """The string literals of a Python file naming a path under FOLDERS, docstrings aside."""
    return [(line, value) for line, value in string_literals(path) if NAMED.search(value)]


def python_files(root: Path) -> list[Path]:
    """gpu_rent's modules, the roles' own VM programs (a role's links into gpu_rent are read there), the benches
    and the plugins."""
    found = sorted(root.glob("gpu_rent/**/*.py")) + sorted(
        p for pattern in ("roles/*/files/**/*.py", "bench/*.py", "plugins/**/*.py") for p in root.glob(pattern)
        if not p.is_symlink()
    )  # fmt: skip
    return [p for p in found if p != root / "gpu_rent" / "on_vm" / "paths.py"]


@pytest.mark.parametrize("path", python_files(ROOT), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_python_file_but_paths_py_writes_a_vm_path(path):
    plugin = path.is_relative_to(ROOT / "plugins")
    written = [value for _, value in literals(path) if not plugin or set(PATH_TOKEN.findall(value)) - PLUGIN_PATHS]
    assert written == [], (
        f"{path.relative_to(ROOT)}: import it from gpu_rent/on_vm/paths.py (on_vm: from . import paths)"
    )


def test_the_rules_find_what_they_are_for(tmp_path):
    (tmp_path / "m.py").write_text(
        '"""Reads /run/gpu-rent/idle-killer.json: a docstring may name it."""\n'
        "# and so may a comment: /run/gpu-rent/seeding\n"
        'STATUS = "/run/gpu-rent/idle-killer.json"\n'
        'def f(): return f"cat {STATUS} /mnt/swarm_data/Output"\n'
        'OTHER = "/run/gpu-rent-other /x/run/gpu-rent"\n'
        'ARGV = ["env", "PYTHONPATH=/usr/local/lib/gpu-rent", "python3"]\n'
    )
    assert literals(tmp_path / "m.py") == [
        (3, "/run/gpu-rent/idle-killer.json"),
        (4, " /mnt/swarm_data/Output"),
        (6, "PYTHONPATH=/usr/local/lib/gpu-rent"),
    ]
    (tmp_path / "roles" / "r" / "defaults").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "defaults" / "main.yml").write_text(
        "r_lock: /run/gpu-rent/seeding\nr_mount: \"{{ x | default('/mnt/swarm_data') }}\"\nr_name: gpu-rent\n"
    )
    assert yaml_copies(tmp_path) == {
        ("roles/r/defaults/main.yml", "r_lock"): "/run/gpu-rent/seeding",
        ("roles/r/defaults/main.yml", "r_mount"): "{{ x | default('/mnt/swarm_data') }}",
    }
    assert the_same("{{ x | default('/mnt/swarm_data') }}", paths.DATA_MOUNT)
    assert not the_same("/run/gpu-rent/seeding.lock", paths.SEEDING_LOCK)


def test_the_handoff_key_the_laptop_writes_is_the_one_the_killer_reads():
    """The server metadata key up hands the killer's credential under (module_utils, which runs without
    gpu_rent) is on_vm/paths.py's, and the role's metadata service is paths.py's, where the VM looks."""
    handoff = load("gpu_rent_killer_handoff", ROOT / "plugins" / "module_utils" / "gpu_rent_killer_handoff.py")
    assert handoff.HANDOFF_KEY == paths.HANDOFF_KEY
    lookup = load("gpu_rent_lookup", ROOT / "plugins" / "module_utils" / "gpu_rent_lookup.py")
    assert lookup.HANDOFF_KEY == paths.HANDOFF_KEY
    defaults = yaml.safe_load((ROOT / "roles/idle_killer/defaults/main.yml").read_text())
    assert defaults["idle_killer_metadata_url"] == paths.METADATA_URL
