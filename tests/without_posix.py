"""gpu-rent run as on a laptop without POSIX-only modules (Windows): they are refused before gpu_rent loads.

The blocking is `sys.modules[name] = None`, which makes every later `import name` raise ImportError. asyncssh
and psutil choose their own branch by sys.platform (their Windows one needs none of these modules), so they
are loaded before the blocking, with their Linux branch. ansible-runner is not among them: it has no Windows
branch, which is why the laptop-only commands must not import it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BLOCKED = ("fcntl", "pwd", "grp", "termios", "tty", "pty", "resource")

PREAMBLE = f"""\
import os, signal, sys
import asyncssh, psutil
for name in {BLOCKED!r}:
    sys.modules[name] = None
# Windows has no fork and no SIGHUP: nothing on the laptop side may count on them
del os.fork, os.register_at_fork, signal.SIGHUP
"""
CLI = PREAMBLE + "sys.argv[0] = 'gpu-rent'\nfrom gpu_rent.cli.app import main\nmain()\n"

# gpu_rent/rental/runner.py imports ansible_runner when it is loaded, and ansible_runner imports fcntl on every
# platform. Until runner.py loads it on first use, every command fails to start without fcntl.


def env(**extra: str) -> dict[str, str]:
    # Windows always sets USERNAME, and getpass (asyncssh asks it) reads it before it would try pwd
    username = os.environ.get("USERNAME") or "gpu-rent"
    return {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", "USERNAME": username, **extra}


def python(code: str, *args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """`python -c PREAMBLE+code args`; its output as text."""
    return subprocess.run(
        [sys.executable, "-c", PREAMBLE + code, *args],
        capture_output=True, text=True, timeout=timeout, env=env(), **kwargs,
    )  # fmt: skip


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`gpu-rent args` without POSIX-only modules."""
    result = subprocess.run(
        [sys.executable, "-c", CLI, *args], capture_output=True, text=True, timeout=timeout, env=env()
    )
    return result


def popen_cli(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CLI, *args], env=env(), text=True, **kwargs)
