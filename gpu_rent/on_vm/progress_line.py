"""The `::gpu-rent-progress {...}` line protocol of long remote steps (SPEC §11).

One file for both ends: the wrapper parses the lines, and the seed role ships this very file
in the on_vm package beside its download script (fetch.py) on the VM, which formats them (standard library only).

A remote step prints `::gpu-rent-progress {"done":2472,"total":3862,"stage":"models"}`
among its other output; `done` is required, `total` optional (no total: an
indeterminate bar), `stage` at most 64 characters. Any other or malformed line
is text for humans, never an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

PREFIX = "::gpu-rent-progress "
MAX_STAGE = 64


@dataclass(frozen=True)
class ProgressLine:
    done: int
    total: int | None = None
    stage: str | None = None


def format_line(done: int, total: int | None = None, stage: str | None = None) -> str:
    """The line for `done` of `total`; a longer stage is cut to MAX_STAGE with an ellipsis."""
    obj: dict = {"done": int(done)}
    if total is not None:
        obj["total"] = int(total)
    if stage is not None:
        obj["stage"] = stage if len(stage) <= MAX_STAGE else stage[: MAX_STAGE - 1] + "…"
    return PREFIX + json.dumps(obj, separators=(",", ":"))


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse(line: str) -> ProgressLine | None:
    """The progress object of one line, or None for any other or malformed line."""
    line = line.strip()
    if not line.startswith(PREFIX):
        return None
    try:
        data = json.loads(line[len(PREFIX) :])
    except ValueError:
        return None
    if not isinstance(data, dict) or not _count(data.get("done")):
        return None
    total, stage = data.get("total"), data.get("stage")
    if total is not None and not _count(total):
        return None
    if stage is not None and (not isinstance(stage, str) or len(stage) > MAX_STAGE):
        return None
    return ProgressLine(data["done"], total, stage)


def last(text: str | None) -> ProgressLine | None:
    """The latest valid progress line in a block of output (a task's stdout)."""
    for line in reversed((text or "").splitlines()):
        found = parse(line)
        if found is not None:
            return found
    return None
