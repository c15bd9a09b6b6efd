"""The one machine-readable line every bench prints per metric, besides its human output, and its reader.

    ::gpu-rent-bench name=throughput ratio=0.93 goal=">= 0.8" reference="ssh -N -L"

`name` is one word; `goal` and `reference` are JSON strings. bench/run_all.py collects these lines.

A figure one bench measures and another uses in the same run (warm_up's seconds, which idle_tax bills at each
re-rent) goes through the folder run_all names in BENCH_FIGURES for that run: `leave` writes, `left` reads.
"""

from __future__ import annotations

import json
import operator
import os
import re
from pathlib import Path

PREFIX = "::gpu-rent-bench"
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')
_COMPARE = {"<=": operator.le, ">=": operator.ge}
FIGURES = "BENCH_FIGURES"  # a folder bench/run_all.py makes for one run, empty at its start


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


def leave(bench: str, **figures: float) -> None:
    """Keep this bench's figures for a bench that runs after it in this run; nothing outside run_all."""
    folder = os.environ.get(FIGURES)
    if folder:
        (Path(folder) / f"{bench}.json").write_text(json.dumps(figures))


def left(bench: str) -> dict | None:
    """The figures bench left in this run; None when it did not run (or failed) before this one."""
    folder = os.environ.get(FIGURES)
    try:
        figures = json.loads((Path(folder) / f"{bench}.json").read_text()) if folder else None
    except (OSError, ValueError):
        return None
    return figures if isinstance(figures, dict) else None
