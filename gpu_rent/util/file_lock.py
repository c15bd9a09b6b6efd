"""The cross-platform file lock the laptop side uses (the project's lock, the tunnel's life lock).

filelock takes flock on Linux and macOS and LockFileEx on Windows: both belong to an open file, so the
system drops them when the holder dies however it dies. Where fcntl is missing on a POSIX system it falls
back to a marker file whose holder's pid a waiter checks, so a killed holder still frees it.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    # The marker fallback is the designed behaviour where fcntl is missing; a warning would break the one-line output.
    warnings.filterwarnings("ignore", "only soft file lock is available")
    from filelock import FileLock, Timeout

__all__ = ["FileLock", "Timeout"]
