"""ConfigError: the one-line problem every project file's reader raises (gpu-rent.vars, .env, seed.yml).

Its own module so that the readers of the project's other files (seed_list) and config, which loads them
all, import it from below rather than from each other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


class ConfigError(Exception):
    """One line: `<file>[:<line>]: <what is wrong and what is expected>`."""

    def __init__(self, file: str, message: str, *, line: int | None = None, key: str | None = None):
        # Messages may quote text from outside (openstacksdk errors); the CLI promises one line.
        self.file, self.line, self.key = file, line, key
        self.message = " ".join(message.split())
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message}"


def masked(text: str) -> str:
    """text as an output line may show it: a URL's user:secret@ never (the line may be logged), but ***@. Up to the
    last @ before a space or the end: a password may hold @ or /, and to hide a host too is the lesser harm."""
    return re.sub(r"(://)\S*@", r"\1***@", text)


def one_line(error: Exception, secrets: Iterable[str] = ()) -> str:
    """An outside error's text on one line, masked, with any secret it might quote blanked out (uncut)."""
    text = masked(" ".join(str(error).split()))  # openstacksdk's errors quote the auth URL
    for secret in secrets:
        text = text.replace(secret, "***")
    return text
