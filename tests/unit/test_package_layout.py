"""The code's shape the style asks for (docs/architecture.md): gpu_rent/ in packages on floors, and the rules
that keep each package answering one question. Each rule is a function of the source read with ast (nothing is
imported), so an import hidden in a function or a `lazy("gpu_rent.…")` string counts like one at the top; each
rule is also shown failing on a small tree that breaks it.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from tests.source import string_literals

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gpu_rent"
LONG = 500
# A package may import only from packages on lower floors (or from itself).
FLOORS = {"cli": 6, "watch": 5, "setup": 4, "rental": 4, "cloud": 3, "to_vm": 3, "project": 2, "util": 1, "on_vm": 1}
# What laptop code may take from on_vm: the protocol both sides speak. idle_killer, idle_look and fetch need
# fcntl or pwd, and status must still load on Windows (tests/unit/test_no_posix_modules.py).
PORTABLE_ON_VM = {"progress_line", "ollama_name", "paths"}
NEVER = {  # package -> packages it must never import, whatever their floor
    "setup": {"rental", "watch", "to_vm"},  # setup checks a login and writes files; it rents nothing
    "cloud": {"to_vm"},  # the two wires, the OpenStack API and SSH, stay apart
    "to_vm": {"cloud"},
}
# project/ reads files: it never opens a connection (openstacksdk is only resolved there, inside functions)
NETWORK_MODULES = {"urllib.request", "http.client", "requests", "asyncssh", "paramiko", "aiohttp", "socket"}
# OPERATOR_CIDR=auto asks the kernel which route reaches Keystone: a UDP socket's connect sends nothing
SOCKET_ALLOWED = {"gpu_rent.project.settings"}
SDK_MODULES = {"openstack", "keystoneauth1"}  # resolved or caught in project/, only inside functions


class Import:
    def __init__(self, target: str, top: bool, line: int, relative: bool = False):
        self.target, self.top, self.line, self.relative = target, top, line, relative


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path, modules: set[str]) -> list[Import]:
    """Every module `path` imports (absolute names; relative ones resolved), where, and whether at the top."""
    tree = ast.parse(path.read_text())
    top_level = {id(node) for node in tree.body}
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            ours = base.split(".")[0] == root.name
            # an outside name as written (from urllib import request: urllib.request); one of ours: its module
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules or not ours else base for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "lazy" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names = [arg.value]
        relative = isinstance(node, ast.ImportFrom) and node.level > 0
        found += [Import(name, id(node) in top_level, node.lineno, relative) for name in names if name != "__future__"]
    return found


def tree_of(root: Path) -> dict[str, tuple[Path, list[Import]]]:
    files = sorted(root.rglob("*.py"))
    modules = {module_name(path, root) for path in files}
    return {module_name(path, root): (path, imports_of(path, root, modules)) for path in files}


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in FLOORS) else ""


def violations(root: Path) -> list[str]:
    """Every broken rule as `<module>:<line>: <rule>`; empty when the tree keeps them all."""
    tree, found = tree_of(root), []
    name = root.name
    for module, (_, imports) in tree.items():
        pkg = package_of(module)
        for imp in imports:
            where = f"{module}:{imp.line}"
            ours = imp.target == name or imp.target.startswith(name + ".")
            first = imp.target.split(".")[0]
            if pkg == "on_vm":
                sibling = imp.target.startswith(f"{name}.on_vm.") or imp.target == f"{name}.on_vm"
                relative = sibling and imp.relative
                if ours and not relative:
                    found.append(
                        f"{where}: on_vm imports {imp.target}; only siblings, relatively (the VM has no gpu_rent)"
                    )
                elif not ours and first not in sys.stdlib_module_names:
                    found.append(f"{where}: on_vm imports {imp.target}, not the standard library")
                continue
            if first in ("typer", "click") and pkg != "cli":
                found.append(f"{where}: {imp.target} outside cli/")
            network = any(imp.target == m or imp.target.startswith(m + ".") for m in NETWORK_MODULES)
            if pkg == "project" and network and not (first == "socket" and module in SOCKET_ALLOWED):
                found.append(f"{where}: project/ imports {imp.target}: it never opens a connection")
            if pkg == "project" and first in SDK_MODULES and imp.top:
                found.append(f"{where}: project/ imports {first} at its top; only inside functions")
            if not ours:
                continue
            target = package_of(imp.target)
            if pkg == "util" and target != "util":
                found.append(f"{where}: util/ imports {imp.target}: it knows nothing of gpu_rent")
            if target == "on_vm" and imp.target.split(".")[2:3] and imp.target.split(".")[2] not in PORTABLE_ON_VM:
                found.append(f"{where}: laptop code imports {imp.target}; from on_vm only {sorted(PORTABLE_ON_VM)}")
            if target == "cli" and not module.endswith("__main__") and pkg != "cli":
                found.append(f"{where}: imports {imp.target}: nothing imports the CLI")
            if pkg and target and target != pkg:
                if target in NEVER.get(pkg, ()):
                    found.append(f"{where}: {pkg}/ never imports {target}/")
                elif FLOORS[target] >= FLOORS[pkg]:
                    found.append(f"{where}: {pkg}/ (floor {FLOORS[pkg]}) imports {target}/ (floor {FLOORS[target]})")
    graph = {m: {i.target for i in imps if i.target in tree and i.target != m} for m, (_, imps) in tree.items()}
    loop = cycle(graph)
    if loop:
        found.append(f"{loop[0]}: import cycle {' -> '.join(loop)}")
    return found


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as the path that closes it, or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for imported in sorted(graph[module]):
            found = visit(imported, [*path, module])
            if found:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module, [])
        if found:
            return found
    return None


def test_gpu_rent_keeps_every_layout_rule():
    tree = tree_of(PACKAGE)
    assert sum(len(imps) for _, imps in tree.values()) > 100, "the reader missed gpu_rent's imports"
    assert violations(PACKAGE) == []


def test_gpu_rent_is_in_its_packages_and_nothing_else():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"]
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(FLOORS)


# ------------------------------------------------------------------------- each rule, broken once


def _make(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "gpu_rent"
    for rel in {"__init__.py", *(f"{pkg}/__init__.py" for pkg in FLOORS)}:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    for rel, text in files.items():
        (root / rel).write_text(text)
    return root


BROKEN = {
    "on_vm imports gpu_rent.project.keys; only siblings": {
        "on_vm/a.py": "from gpu_rent.project import keys\n",
        "project/keys.py": "",
    },
    "on_vm imports gpu_rent.on_vm.b; only siblings": {"on_vm/a.py": "from gpu_rent.on_vm import b\n", "on_vm/b.py": ""},
    "on_vm imports yaml, not the standard library": {"on_vm/a.py": "def f():\n    import yaml\n"},
    "laptop code imports gpu_rent.on_vm.idle_look": {
        "to_vm/a.py": "from gpu_rent.on_vm import idle_look\n",
        "on_vm/idle_look.py": "",
    },
    "rental/ (floor 4) imports watch/ (floor 5)": {
        "rental/a.py": "def f():\n    from gpu_rent.watch import w\n",
        "watch/w.py": "",
    },
    "imports gpu_rent.cli.app: nothing imports the CLI": {
        "watch/a.py": "from gpu_rent.cli.app import app\n",
        "cli/app.py": "",
    },
    "typer outside cli/": {"rental/a.py": "import typer\n"},
    "setup/ never imports rental/": {"setup/a.py": "from gpu_rent.rental import r\n", "rental/r.py": ""},
    "setup/ never imports to_vm/": {"setup/a.py": 'x = lazy("gpu_rent.to_vm.ssh")\n', "to_vm/ssh.py": ""},
    "cloud/ never imports to_vm/": {"cloud/a.py": "from gpu_rent.to_vm import ssh\n", "to_vm/ssh.py": ""},
    "to_vm/ never imports cloud/": {"to_vm/a.py": "from gpu_rent.cloud import view\n", "cloud/view.py": ""},
    "project/ imports urllib.request: it never opens a connection": {"project/a.py": "import urllib.request\n"},
    "project/ imports urllib.request: it never": {"project/a.py": "def f():\n    from urllib import request\n"},
    "project/ imports socket.create_connection": {"project/a.py": "from socket import create_connection\n"},
    "project/ imports openstack at its top": {"project/a.py": "import openstack\n"},
    "project/ (floor 2) imports cloud/ (floor 3)": {"project/a.py": "from gpu_rent.cloud import c\n", "cloud/c.py": ""},
    "util/ imports gpu_rent.project.state": {
        "util/a.py": "from gpu_rent.project import state\n",
        "project/state.py": "",
    },
    "import cycle gpu_rent.rental.a -> gpu_rent.rental.b -> gpu_rent.rental.a": {
        "rental/a.py": "from gpu_rent.rental import b\n",
        "rental/b.py": "def f():\n    from . import a\n",
    },
}


@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_each_rule_fails_on_a_tree_that_breaks_it(rule, tmp_path):
    said = violations(_make(tmp_path, BROKEN[rule]))
    assert any(rule in line for line in said), said


def test_a_tree_that_keeps_the_rules_passes(tmp_path):
    kept = {
        "on_vm/a.py": "import json\nfrom . import b\nfrom .b import x\n",
        "on_vm/b.py": "x = 1\n",
        "on_vm/paths.py": "",
        "rental/r.py": "from gpu_rent.on_vm import paths\nfrom gpu_rent.project import s\nfrom . import t\n",
        "rental/t.py": "",
        "project/s.py": "def f():\n    import openstack\n",
        "cli/app.py": "import typer\nfrom gpu_rent.rental import r\n",
        "__main__.py": "from gpu_rent.cli.app import app\n",
    }
    assert violations(_make(tmp_path, kept)) == []


# ------------------------------------------------------------------------- a fact written once


def runtime_names() -> set[str]:
    """The runtime folder and what lives in it, as project/state.py names them."""
    text = (PACKAGE / "project" / "state.py").read_text()
    names = dict(re.findall(r'^([A-Z_]+(?:DIR|FILE)) = "([^"]+)"', text, re.M))
    assert names["RUNTIME_DIR"] == ".gpu-rent" and len(names) >= 10, names
    assert len(set(names.values())) == len(names), "two names for one file"
    return set(names.values())


def test_the_roles_name_only_runtime_files_project_state_names():
    """YAML cannot import: what a role or playbook puts under the runtime folder must be a name state.py has."""
    used = {
        (str(path.relative_to(ROOT)), name)
        for path in [*ROOT.glob("roles/*/*/*.yml"), *ROOT.glob("playbooks/*.yml")]
        for name in re.findall(r"gpu_rent_runtime_dir \}\}/([\w.-]+)", path.read_text())
    }
    assert used, "no role names a runtime file: the pattern missed them"
    assert sorted(item for item in used if item[1] not in runtime_names()) == []


def test_each_runtime_path_is_written_once_in_project_state():
    names = runtime_names()
    again = [
        f"{path.relative_to(ROOT)}:{line}: {value!r}"
        for path in PACKAGE.rglob("*.py")
        if path != PACKAGE / "project" / "state.py" and "on_vm" not in path.parts  # the VM's are in on_vm/paths.py
        for line, value in string_literals(path)
        if (value in names and "." in value) or value.startswith(".gpu-rent/")  # "lock", "logs": words too
    ]
    assert again == [], "name it from project/state.py instead"


def long_files() -> list[Path]:
    roots = ("gpu_rent", "plugins", "bench", "ground", "tests")
    files = sorted(path for root in roots for path in (ROOT / root).rglob("*.py") if not path.is_symlink())
    return [path for path in files if len(path.read_text().splitlines()) > LONG]


@pytest.mark.parametrize("path", long_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_a_file_past_500_lines_says_why_it_stays_one(path):
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert re.search(r"\bone\s+file\b", docstring, re.IGNORECASE), (
        f"{path.relative_to(ROOT)}: past {LONG} lines and its docstring does not say why it stays one file"
    )
