"""Python source read as data by the tests that hold a fact to one place (nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

_HAS_DOCSTRING = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def string_literals(path: Path) -> list[tuple[int, str]]:
    """Every string constant of a Python file as (line, value), docstrings left out: prose may name a path."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, _HAS_DOCSTRING)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    )
