"""The one machine-readable line every bench prints per metric, besides its human output, and its reader.

    ::gpu-rent-bench name=throughput ratio=0.93 goal=">= 0.8" reference="ssh -N -L"

`name` is one word; `goal` and `reference` are JSON strings. bench/run_all.py collects these lines.
"""

from __future__ import annotations

import json
import operator
import re

PREFIX = "::gpu-rent-bench"
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')
_COMPARE = {"<=": operator.le, ">=": operator.ge}


def report(name: str, ratio: float, goal: str, reference: str) -> None:
    """Print the line for one metric; goal is "<= X" or ">= X"."""
    assert re.fullmatch(r"[\w.-]+", name), name
    assert goal.split()[0] in _COMPARE and float(goal.split()[1]) >= 0, goal
    line = f"{PREFIX} name={name} ratio={ratio:.4g} goal={json.dumps(goal)} reference={json.dumps(reference)}"
    print(line, flush=True)


def parse(line: str) -> dict | None:
    """{name, ratio, goal, reference} of a bench line, None for any other line."""
    if not line.startswith(PREFIX + " "):
        return None
    fields = {k: json.loads(v) if v.startswith('"') else v for k, v in _FIELD.findall(line[len(PREFIX) :])}
    try:
        return {"name": fields["name"], "ratio": float(fields["ratio"]), "goal": fields["goal"],
                "reference": fields.get("reference", "")}  # fmt: skip
    except (KeyError, ValueError):
        return None


def met(ratio: float, goal: str) -> bool:
    sign, bound = goal.split()
    return _COMPARE[sign](ratio, float(bound))
