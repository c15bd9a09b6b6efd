"""The code's shape the style asks for: gpu_rent's imports run one way, and a long file says why it stays one.

Both read the source with ast only (nothing is imported), so a cycle hidden in a function-level import is
found as well as one at the top.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gpu_rent"
LONG = 500


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The gpu_rent modules `path` imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[1] for alias in node.names if alias.name.startswith("gpu_rent."))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "gpu_rent":
            parts = node.module.split(".")
            found.update([parts[1]] if len(parts) > 1 else [alias.name for alias in node.names])
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.update([node.module.split(".")[0]] if node.module else [alias.name for alias in node.names])
    return found & modules - {path.stem}


def import_graph() -> dict[str, set[str]]:
    modules = {path.stem for path in PACKAGE.glob("*.py")}
    return {path.stem: imported_modules(path, modules) for path in PACKAGE.glob("*.py")}


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


def test_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    (tmp_path / "config.py").write_text("def load():\n    from gpu_rent import seed_list\n")
    (tmp_path / "seed_list.py").write_text("from gpu_rent.project.settings import ConfigError\n")
    (tmp_path / "cli.py").write_text("from . import config\n")
    modules = {"config", "seed_list", "cli"}
    graph = {name: imported_modules(tmp_path / f"{name}.py", modules) for name in modules}
    assert graph == {"config": {"seed_list"}, "seed_list": {"config"}, "cli": {"config"}}
    assert cycle(graph) in (["config", "seed_list", "config"], ["seed_list", "config", "seed_list"])
    assert cycle({"cli": {"config"}, "config": {"seed_list"}, "seed_list": set()}) is None


def test_gpu_rent_imports_run_one_way():
    graph = import_graph()
    assert graph["cli"], "the import graph is empty: the reader missed gpu_rent's imports"
    assert cycle(graph) is None, f"import cycle: {' -> '.join(cycle(graph))}"


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
