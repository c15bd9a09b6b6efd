"""Files written whole or not at all: a reader, or an interrupted command, never sees half of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, text: str, mode: int = 0o600) -> None:
    """Replace path with text, with this mode; an interrupted write leaves the old file and no temp file."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if hasattr(os, "fchmod"):  # POSIX; Windows (where tunnel records are written too) has no modes to set
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
