"""Before anything is rented: `doctor` against the ground, and `up`'s question on a real terminal.

doctor passes every check on a good project, names each kind of miss, and changes nothing; up asks
"Rent it?" on a terminal, and both "no" and Ctrl+C there leave the cloud as it was.
"""

import os
import pty
import re
import select
import signal
import time

import pytest
import yaml

from tests.ground.test_rental import BIN, Ours, gpu_rent, make_project
from tests.groundkit import CLOUDS_YAML

SECRET = "not-the-password-0815"


def checks(stdout: str) -> dict[str, tuple[bool, str]]:
    """check name -> (ok, detail), from doctor's `ok  name: detail` / `FAIL name: detail` lines."""
    found = {}
    for line in stdout.splitlines():
        match = re.fullmatch(r"(ok  |FAIL) ([^:]+(?:: [a-z ]+)?): (.*)", line)
        assert match, f"not a check line: {line!r}"
        found[match[2]] = (match[1] == "ok  ", match[3])
    return found


def test_every_check_passes_on_the_ground_and_nothing_is_made(tmp_path, member_conn):
    project = make_project(tmp_path, "doctor-ok")
    files = sorted(project.rglob("*"))
    result = gpu_rent(project, "doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    found = checks(result.stdout)
    assert all(ok for ok, _ in found.values()), result.stdout
    assert {
        "ssh key", "auth", "catalog: compute", "catalog: network", "catalog: image", "catalog: block storage",
        "pool ru-7a", "flavor gpu.a100.1", "flavor gpu.l4.1", "flavor gpu.a10.1", "image", "external network",
        "quota: servers", "idle-killer credential",
    } <= set(found)  # fmt: skip
    # a throw-away credential allowed one GET of a server no one has: Nova matched its rule and answered 404
    assert re.fullmatch(r"Nova enforces the killer's access rule at /v2\.1/servers/[0-9a-f-]{36}",
                        found["idle-killer credential"][1]), found["idle-killer credential"]  # fmt: skip
    user = member_conn.current_user_id
    assert [c.name for c in member_conn.identity.application_credentials(user) if "doctor" in c.name] == []
    assert not any(Ours(member_conn, "doctor-ok").everything().values())
    assert sorted(project.rglob("*")) == files


def test_a_flavor_and_a_pool_the_cloud_lacks_are_each_named_with_exit_1(tmp_path):
    project = make_project(tmp_path, "doctor-miss")
    settings = project / "gpu-rent.vars"
    text = re.sub(r"(?m)^FLAVOR_FALLBACK=.*$", "FLAVOR_FALLBACK=gpu.l4.1,gpu.nope.1", settings.read_text())
    settings.write_text(text + "POOL_FALLBACK=ru-9z\n")
    result = gpu_rent(project, "doctor")
    assert result.returncode == 1, result.stdout + result.stderr
    found = checks(result.stdout)
    assert found["flavor gpu.nope.1"] == (False, "not found")
    assert found["pool ru-9z"][0] is False and "ru-7a" in found["pool ru-9z"][1]
    assert [name for name, (ok, _) in found.items() if not ok] == ["pool ru-9z", "flavor gpu.nope.1"]


def test_a_refused_login_is_exit_4_and_never_shows_the_password(tmp_path):
    project = make_project(tmp_path, "doctor-login")
    clouds = yaml.safe_load(CLOUDS_YAML.read_text())
    clouds["clouds"]["ground"]["auth"]["password"] = SECRET
    (project / "clouds.yaml").write_text(yaml.safe_dump(clouds))
    env = (project / ".env").read_text()
    (project / ".env").write_text(re.sub(r"(?m)^OS_CLIENT_CONFIG_FILE=.*$", "OS_CLIENT_CONFIG_FILE=clouds.yaml", env))
    result = gpu_rent(project, "doctor")
    assert result.returncode == 4, result.stdout + result.stderr
    assert SECRET not in result.stdout + result.stderr and "Traceback" not in result.stderr
    found = checks(result.stdout)
    assert found["swarmui version"][0] is True and found["ssh key"][0] is True
    assert found["auth"][0] is False and "401" in found["auth"][1]
    # the checks of the folder alone, then the login; nothing is asked of a cloud that refused it
    assert list(found) == ["swarmui version", "ssh key", "login values", "auth"]
    assert found["login values"] == (True, 'OS_CLIENT_CONFIG_FILE, OS_CLOUD from .env; the rest from clouds.yaml entry '
                                           f'"ground" ({project.resolve() / "clouds.yaml"})')  # fmt: skip


def up_at_a_terminal(project, answer: bytes) -> tuple[int, str]:
    """gpu-rent up on a pseudo-terminal: waits for its question, types `answer`; (exit code, all it printed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))}
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, its stdin a terminal as a user's is
        os.chdir(project)
        # as a shell starts it: Ctrl+C's SIGINT at its default. A test run started in the background
        # of a non-interactive shell (`... &`) ignores SIGINT, the exec keeps it ignored, and the
        # command then never sees the Ctrl+C typed here (the terminal echoes ^C, nothing happens)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execve(str(BIN / "gpu-rent"), ["gpu-rent", "up", "--no-tunnel"], env)
    seen, answered, deadline = b"", False, time.monotonic() + 120
    sent, next_answer = 0, 0.0
    try:
        while time.monotonic() < deadline:
            if b"Rent it? [y/N]: " in seen and time.monotonic() >= next_answer and sent < 3:
                # a person answers after reading the question: a Ctrl+C sent within microseconds of the prompt
                # can land before Python's input() blocks in read(), and CPython then sees it only after Enter;
                # so, like a person whose first Ctrl+C did nothing, it presses again a few seconds later
                time.sleep(0.5)
                os.write(fd, answer)
                answered, sent, next_answer = True, sent + 1, time.monotonic() + 5
            ready, _, _ = select.select([fd], [], [], 1)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the command ended and closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        else:
            os.kill(pid, 9)
            pytest.fail(f"up did not end within 120 s: {seen.decode(errors='replace')}")
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert answered, seen.decode(errors="replace")
    return os.waitstatus_to_exitcode(status), seen.decode(errors="replace")


@pytest.mark.parametrize(("answer", "said"), [(b"n\r", "nothing rented: not confirmed"), (b"\x03", "canceled")],
                         ids=["no", "ctrl-c"])  # fmt: skip
def test_no_or_ctrl_c_at_the_question_rents_nothing_and_exits_130(tmp_path, member_conn, answer, said):
    project = make_project(tmp_path, f"ask-{'no' if answer.startswith(b'n') else 'ctrlc'}")
    code, printed = up_at_a_terminal(project, answer)
    assert code == 130, printed
    words = " ".join(printed.split())  # the terminal is 80 columns wide: lines wrap
    assert "gpu.a100.1" in words and "at most 1.35/hour" in words, printed  # what it would rent, before asking
    assert said in words and "Traceback" not in printed, printed
    assert not any(Ours(member_conn, project.name).everything().values())
