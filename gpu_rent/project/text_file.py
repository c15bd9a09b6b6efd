"""The small text files a person writes for gpu-rent (gpu-rent.vars, .env, seed.yml, ollama-models.yaml, a .pub
key, clouds.yaml), read so that no such file can hang a command, eat its memory or end it in a traceback.

A FIFO would block the read forever and /dev/zero would never end, so only a regular file (after symlinks) is
read, and at most LIMIT bytes of it. A problem is one `Unreadable` whose words follow the file's name; each
reader turns it into its own one-line error. Imports nothing of gpu_rent: config, seed_list and llm_models
all use it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# every file read here is a few KiB; a megabyte is a mistake (a model or a log saved under the name), not settings
LIMIT = 1024 * 1024
_LIMIT_SHOWN = "1 MiB"
# Windows editors (Notepad until 2019) start UTF-8 files with it; it is no part of the first line
_BOM = b"\xef\xbb\xbf"


class Unreadable(ValueError):
    """What is wrong with a file, in words that follow its name ("is a directory, not a file"); line when known."""

    def __init__(self, problem: str, line: int | None = None):
        self.problem, self.line = problem, line
        super().__init__(problem)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    if stat.S_ISFIFO(mode):
        return "is a named pipe (FIFO), not a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a file"
    return "is not a regular file"


def read(path: Path) -> str | None:
    """The text of path as UTF-8 (a leading BOM dropped), or None when nothing at all is there by that name.

    Anything else that is not a regular file of at most LIMIT bytes of UTF-8 raises Unreadable: a symlink to
    nothing is a mistake to say, not a file to take as absent.
    """
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if not path.is_symlink():
            return None
        raise Unreadable(f"is a symlink to {os.readlink(path)}, which is not there") from None
    except OSError as e:
        raise Unreadable(f"cannot be read ({e.strerror or type(e).__name__})") from None
    if not stat.S_ISREG(mode):  # checked before opening: opening a device may already do something
        raise Unreadable(_kind(mode))
    # O_NONBLOCK: should a FIFO take the file's place after the check, opening it does not wait for a writer
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise Unreadable(_kind(mode))
            data = f.read(LIMIT + 1)  # one byte more than allowed tells "too big" without reading all of it
    except OSError as e:
        raise Unreadable(f"cannot be read ({e.strerror or type(e).__name__})") from None
    if len(data) > LIMIT:
        raise Unreadable(f"is larger than {_LIMIT_SHOWN}: far more than this file ever holds")
    return _decoded(data.removeprefix(_BOM))


def _decoded(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        # the line, as str.splitlines counts them, rather than Python's byte offset; the byte is not shown (.env)
        before = data[: e.start].decode("utf-8")
        raise Unreadable("is not UTF-8 text (save it as UTF-8)", line=len((before + "x").splitlines())) from None
