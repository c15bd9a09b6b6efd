"""The laptop-only commands load and run where POSIX-only modules are missing (Windows), issue 16.

Each runs in a fresh process in which fcntl, pwd, grp, termios, tty, pty and resource cannot be imported,
os.fork and SIGHUP do not exist (tests/without_posix.py). The tunnel itself, end to end, is
tests/local/test_tunnel_without_fcntl.py (it needs the loopback sshd).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests import without_posix

LAPTOP_ONLY = ["status", "tunnel", "open", "hold", "ssh", "logs", "push", "pull-output", "watchdog"]


@pytest.fixture
def project(dead_cloud_project: Path) -> Path:
    return dead_cloud_project


def test_the_blocking_itself_holds():
    code = "import importlib\nfor name in sys.argv[1:]:\n    try:\n        importlib.import_module(name)\n"
    code += "    except ImportError:\n        print(name)\nprint(hasattr(os, 'fork'), hasattr(signal, 'SIGHUP'))\n"
    result = without_posix.python(code, *without_posix.BLOCKED)
    assert result.stdout.split() == [*without_posix.BLOCKED, "False", "False"], result.stderr


# One process runs many commands (through Click's runner): each process start costs more than the commands.
EACH = textwrap.dedent(
    """
    import json
    from typer.testing import CliRunner
    from gpu_rent.cli.app import app
    for args in json.loads(sys.argv[1]):
        result = CliRunner().invoke(app, args)
        print(json.dumps([" ".join(args[:1]), result.exit_code, result.output]))
    """
)


def each(*commands: list[str]) -> dict[str, tuple[int, str]]:
    """{command: (exit code, output)} of each command line, all run in one process without POSIX-only modules."""
    result = without_posix.python(EACH, json.dumps(commands))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return {name: (code, output) for name, code, output in map(json.loads, result.stdout.splitlines())}


def test_help_of_each_laptop_only_command():
    seen = each(*([command, "--help"] for command in LAPTOP_ONLY))
    assert {name: (code, "--project" in output) for name, (code, output) in seen.items()} == {
        command: (0, True) for command in LAPTOP_ONLY
    }


@pytest.mark.parametrize("command", ["status", "hold"])
def test_a_cloud_that_never_answers_is_the_usual_one_line_error(project, command):
    blocked = without_posix.cli(command, "-p", str(project))
    usual = subprocess.run(
        [sys.executable, "-m", "gpu_rent", command, "-p", str(project)],
        capture_output=True, text=True, timeout=120, env=without_posix.env(),
    )  # fmt: skip
    assert blocked.returncode == usual.returncode == 4, blocked.stderr
    lines = [line for line in blocked.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the cloud"), blocked.stderr


def test_the_commands_that_need_the_vm_say_there_is_none(project):
    commands = ["ssh", "logs", "push", "pull-output", "open"]
    seen = each(*([command, "-p", str(project)] for command in commands))
    none = "error: no VM address in the state: run gpu-rent up first"
    assert {name: (code, output.strip()) for name, (code, output) in seen.items()} == {c: (2, none) for c in commands}


def test_closing_a_tunnel_when_none_runs(project):
    result = without_posix.cli("tunnel", "--close", "-p", str(project))
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, "no tunnel runs", "")


HOLDER = textwrap.dedent(
    """
    from pathlib import Path
    from gpu_rent.project.state import StateStore
    with StateStore(Path(sys.argv[1])).lock("up"):
        print("locked", flush=True)
        sys.stdin.readline()
    """
)
WAITER = textwrap.dedent(
    """
    import json
    from pathlib import Path
    from gpu_rent.project.state import StateLocked, StateStore
    try:
        with StateStore(Path(sys.argv[1])).lock("stop", wait=float(sys.argv[2])):
            print(json.dumps({"got": True}))
    except StateLocked as e:
        print(json.dumps({"got": False, "command": e.command, "pid": e.pid, "message": str(e)}))
    """
)


@pytest.fixture
def holder(tmp_path: Path):
    proc = subprocess.Popen(
        [sys.executable, "-c", without_posix.PREAMBLE + HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=without_posix.env(),
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "locked", proc.stderr.read()
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def wait_for_lock(project: Path, wait: float) -> dict:
    result = without_posix.python(WAITER, str(project), str(wait))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return json.loads(result.stdout)


def test_the_project_lock_refuses_a_second_process(tmp_path: Path, holder: subprocess.Popen):
    started = time.monotonic()
    seen = wait_for_lock(tmp_path, 0.3)
    assert time.monotonic() - started >= 0.3
    assert (seen["got"], seen["command"], seen["pid"]) == (False, "up", holder.pid)
    assert seen["message"].startswith(f"another gpu-rent command is running in this project: 'up' (pid {holder.pid}")


@pytest.mark.parametrize("ending", ["exit", "kill"])
def test_the_project_lock_is_free_after_its_holder_ends(tmp_path: Path, holder: subprocess.Popen, ending: str):
    if ending == "exit":
        holder.stdin.write("done\n")
        holder.stdin.flush()
    else:
        holder.send_signal(signal.SIGKILL if os.name != "nt" else signal.SIGTERM)
    holder.wait(timeout=10)
    assert wait_for_lock(tmp_path, 0.3) == {"got": True}
