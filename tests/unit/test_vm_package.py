"""Each role installs on the VM the part of gpu_rent/on_vm its programs need, as the package on_vm.

A role's files/on_vm links each module it copies (its <role>_modules var lists them, for the copy and the
stamp); the programs import their siblings relatively, so a sibling the role forgot fails only on the VM.
Here each program runs as the role runs it (`python3 -m on_vm.<module>`, PYTHONPATH the role's files/).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ON_VM = ROOT / "gpu_rent" / "on_vm"
# role -> its modules var and the command vars that run one of them
ROLES = {
    "idle_killer": ("idle_killer_modules", ["idle_killer_program"]),
    "seed": ("seed_modules", ["seed_fetch"]),
    "llm_runtime": ("llm_runtime_modules", ["llm_runtime_pull", "llm_runtime_fetch"]),
    "swarmui": ("swarmui_modules", ["swarmui_ready_program"]),
}


def role_vars(role: str) -> dict:
    return yaml.safe_load((ROOT / "roles" / role / "vars" / "main.yml").read_text())


def imports(path: Path) -> tuple[set[str], set[str]]:
    """(the siblings it imports relatively, the top-level modules it imports absolutely)."""
    siblings, absolute = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            siblings.update([node.module] if node.module else [alias.name for alias in node.names])
        elif isinstance(node, ast.ImportFrom):
            absolute.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            absolute.update(alias.name.split(".")[0] for alias in node.names)
    return siblings, absolute


@pytest.mark.parametrize("role", ROLES)
def test_a_role_ships_a_whole_package_of_links_into_gpu_rent_on_vm(role):
    modules_var, commands = ROLES[role]
    modules = role_vars(role)[modules_var]
    files = ROOT / "roles" / role / "files" / "on_vm"
    assert sorted(modules) == sorted(p.name for p in files.iterdir() if p.suffix == ".py"), files
    assert "__init__.py" in modules
    for name in modules:
        assert (files / name).is_symlink() and (files / name).resolve() == ON_VM / name, name
        siblings, absolute = imports(ON_VM / name)
        assert {f"{s}.py" for s in siblings} <= set(modules), f"{name} imports a sibling {role} does not copy"
        assert absolute <= sys.stdlib_module_names | {"__future__"}, f"{name}: the VM has the standard library only"
    for command in commands:
        argv = role_vars(role)[command]
        assert argv[-2] == "-m" and f"{argv[-1].removeprefix('on_vm.')}.py" in modules, (command, argv)


def test_both_roles_that_install_scripts_remove_the_same_flat_ones():
    assert sorted(role_vars("seed")["seed_flat_files"]) == sorted(role_vars("llm_runtime")["llm_runtime_flat_files"])


@pytest.mark.parametrize(
    ("role", "module"),
    [
        ("idle_killer", "idle_killer"),
        ("seed", "fetch"),
        ("llm_runtime", "llm_pull"),
        ("llm_runtime", "fetch"),
        ("swarmui", "swarmui_ready"),
    ],
)
def test_each_program_runs_as_its_role_runs_it_from_what_the_role_copies(role, module, tmp_path):
    """The role's own command line, started where a login lands (its home), with a json.py there: python3 -m puts
    the current folder first on sys.path, so the command must leave it (env -C /) or that file would be json."""
    (tmp_path / "json.py").write_text("raise SystemExit('the json.py of the current folder was imported')\n")
    names = {"idle_killer": "idle_killer_program", "seed": "seed_fetch", "swarmui": "swarmui_ready_program"}
    command = names.get(role) or f"llm_runtime_{module.split('_')[-1]}"
    here = str(ROOT / "roles" / role / "files")  # the package as the role copies it
    argv = [part.replace(f"{{{{ {role}_program_dir }}}}", here) for part in role_vars(role)[command]]
    assert argv[-1] == f"on_vm.{module}", argv
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    ran = subprocess.run([*argv, "--help"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=30)
    assert ran.returncode == 0 and ran.stdout.startswith("usage: "), ran.stderr


def test_the_swarmui_stamp_holds_each_module_it_copies():
    """A warm run skips the copy on the stamp's word: a module gone from the VM must make it stale."""
    stamped = role_vars("swarmui")["swarmui_stamp_files"]
    for name in role_vars("swarmui")["swarmui_modules"]:
        assert f"{{{{ swarmui_program_dir }}}}/on_vm/{name}" in stamped, name
