"""The interactive `gpu-rent setup` on a real pseudo-terminal, against the ground's Keystone, Nova and Glance.

A person's session, key by key: a cloud whose password Keystone refuses, then the right one (a clouds.yaml entry,
or typed OS_* values with the password read without echo); the pool, a GPU flavor (the list offers no CPU flavor),
its price, the image, a new key and the address SSH to the VM is open to (the ground's Keystone is on loopback, so
OPERATOR_CIDR=auto cannot resolve and it is asked; the ground bridge's private 10.231.7.1 is taken, the cloud being on
a private network too); doctor passes the project. A re-run answered with Enter alone changes no byte;
Ctrl+C at a prompt writes nothing. setup and doctor only read the cloud.
"""

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.groundkit import CLOUDS_YAML, IMAGE, POOL

pytestmark = pytest.mark.ground

BIN = Path(sys.executable).parent
FLAVOR = "gpu.l4.1"
SECRET = "not-the-password-0815"
# a list's question, with its default when it has one: `number or name [ground]: `
PICK = r"number or name(?: \[[^\]\n]*\])?: "
KEY = r"\nkey(?: \[[^\]\n]*\])?: "
PRICE = r"price per hour of [^\n]*: "
FALLBACK = r"fallback flavors when [^\n]*: "
# OPERATOR_CIDR's question, long enough for the terminal to wrap it: any whitespace between the words
ADDRESS = r"for\s+SSH\s+to\s+the\s+VM\s+\([^:]*\)(?:\s+\[[^\]]*\])?: "
OPERATOR = "10.231.7.1/32"  # the ground bridge (ground/lib.sh EXT_GW): where the hosts see this machine from
# colours and cursor moves: the terminal shows them, the assertions read the text
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


class Terminal:
    """`gpu-rent setup ARGS` on a pseudo-terminal, its stdin a terminal as a user's is; typed into like a person."""

    def __init__(self, cwd: Path, *args: str, clouds: Path):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))}
        env["OS_CLIENT_CONFIG_FILE"] = str(clouds)
        pid, fd = pty.fork()
        if pid == 0:
            try:
                os.chdir(cwd)
                # as a shell starts it: a test run in the background of a non-interactive shell ignores SIGINT,
                # the exec keeps it ignored, and Ctrl+C would then do nothing (see test_preflight.py)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.execve(str(BIN / "gpu-rent"), ["gpu-rent", "setup", *args], env)
            finally:
                os._exit(127)
        self.pid, self.fd, self.raw, self.mark = pid, fd, b"", 0
        self.open = True

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw.decode(errors="replace")).replace("\r", "")

    def _read(self, seconds: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], seconds)
        if not ready:
            return
        try:
            chunk = os.read(self.fd, 4096)
        except OSError:  # EIO: the command ended and closed the terminal
            chunk = b""
        self.raw += chunk
        self.open = bool(chunk)

    def until(self, question: str, timeout: float = 120) -> str:
        """What was shown since the last answer, up to the question (a regex) that ends it."""
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(question, self.text[self.mark :])
            if match:
                shown = self.text[self.mark : self.mark + match.end()]
                self.mark += match.end()
                return shown
            if not self.open or time.monotonic() > deadline:
                pytest.fail(f"no {question!r} within {timeout:.0f} s: {self.text}")
            self._read(1)

    def answer(self, question: str, typed: str) -> str:
        """Waits for the question, types the answer and Enter; what was shown before it."""
        shown = self.until(question)
        time.sleep(0.3)  # a person reads the question first; keys typed before input() reads are kept anyway
        os.write(self.fd, typed.encode() + b"\r")
        return shown

    def interrupt(self, question: str) -> None:
        """Ctrl+C at the question; pressed again after a few seconds, as a person does when nothing happened.

        A Ctrl+C within microseconds of the prompt can land before input() blocks in read(), and CPython then
        sees it only after Enter (see test_preflight.py)."""
        self.until(question)
        for _ in range(3):
            time.sleep(0.5)
            os.write(self.fd, b"\x03")
            deadline = time.monotonic() + 5
            while self.open and time.monotonic() < deadline:
                self._read(0.5)
            if not self.open:
                return

    def end(self, timeout: float = 300) -> tuple[int, str]:
        """(exit code, all it showed) once it ended."""
        deadline = time.monotonic() + timeout
        try:
            while self.open:
                if time.monotonic() > deadline:
                    os.kill(self.pid, signal.SIGKILL)
                    pytest.fail(f"setup did not end within {timeout:.0f} s: {self.text}")
                self._read(1)
        finally:
            _, status = os.waitpid(self.pid, 0)
            os.close(self.fd)
        return os.waitstatus_to_exitcode(status), self.text


@pytest.fixture
def clouds(member_conn, tmp_path) -> Path:
    """The ground's clouds.yaml plus `ground-wrong`: the same user with a password Keystone refuses."""
    config = yaml.safe_load(CLOUDS_YAML.read_text())
    wrong = yaml.safe_load(yaml.safe_dump(config["clouds"]["ground"]))
    wrong["auth"]["password"] = SECRET
    config["clouds"]["ground-wrong"] = wrong
    path = tmp_path / "clouds.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def first_setup(project: Path, clouds: Path) -> tuple[int, str, dict[str, str]]:
    """The walk through every question of a new project: (exit code, all shown, what each list showed)."""
    term = Terminal(project.parent, "--project", str(project), clouds=clouds)
    lists = {"clouds": term.answer(PICK, "ground-wrong")}
    lists["refused"] = term.answer(PICK, "ground")
    lists["pools"] = term.answer(PICK, POOL)
    lists["flavors"] = term.answer(PICK, FLAVOR)
    term.answer(PRICE, "")
    term.answer(FALLBACK, "")
    lists["images"] = term.answer(PICK, IMAGE)
    lists["key"] = term.answer(KEY, "new")
    term.answer(ADDRESS, "127.0.0.1")  # refused: this machine as it sees itself
    lists["address"] = term.answer(ADDRESS, "10.231.7.1")
    lists["llm"] = term.answer(PICK, "")  # the LLM runtime, asked last: Enter takes none
    code, shown = term.end()
    return code, shown, lists


def doctor(project: Path) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))}
    result = subprocess.run(
        [str(BIN / "gpu-rent"), "doctor"], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    return result.returncode, result.stdout + result.stderr


def test_a_walk_through_every_question_writes_a_project_doctor_passes(tmp_path, clouds):
    project = tmp_path / "project"
    code, shown, lists = first_setup(project, clouds)
    assert code == 0, shown
    assert "ground-wrong" in lists["clouds"] and "127.0.0.1:5000" in lists["clouds"]
    assert "refused the login" in lists["refused"] and lists["refused"].count("error:") == 1
    assert 'logged in: cloud "ground"' in lists["pools"]
    assert re.search(rf"\n +\d+\. {re.escape(POOL)}( \*)?\n", lists["pools"]), lists["pools"]
    flavors = lists["flavors"].split("GPU flavor", 1)[1]
    assert FLAVOR in flavors and "gpu.a100.1" in flavors and "gpu.a10.1" in flavors
    assert "m1.small" not in flavors
    assert IMAGE in lists["images"].split("Image (GPU images first)", 1)[1]
    assert "SSH key" in lists["key"]
    address = " ".join(lists["address"].split())
    assert "127.0.0.1: a loopback address" in address and address.count("error:") == 1
    assert "Your IP address as the cloud's VMs see it, for SSH to the VM (this machine reaches the cloud from " \
           "127.0.0.1, a loopback address; the cloud, at 127.0.0.1, is on a private network too" in address  # fmt: skip
    assert f"\nOPERATOR_CIDR={OPERATOR}\n" in (project / "gpu-rent.vars").read_text()
    assert "LLM runtime" in lists["llm"] and "\nLLM_RUNTIME=none\n" in (project / "gpu-rent.vars").read_text()
    assert not (project / "ollama-models.yaml").exists()
    assert f"next: gpu-rent up --project {project}" in " ".join(shown.split())
    assert SECRET not in shown and "Traceback" not in shown
    env = (project / ".env").read_text()
    assert f"OS_CLOUD=ground\nOS_CLIENT_CONFIG_FILE={clouds}\nGPU_RENT_SSH_KEY={project / 'id_ed25519'}\n" in env
    assert (project / "id_ed25519").is_file()
    code, said = doctor(project)
    assert code == 0 and "FAIL" not in said, said


def test_a_rerun_answered_with_enter_alone_changes_no_byte(tmp_path, clouds):
    project = tmp_path / "project"
    assert first_setup(project, clouds)[0] == 0
    files = {name: (project / name).read_bytes() for name in (".env", "gpu-rent.vars", "id_ed25519")}
    term = Terminal(project, clouds=clouds)  # in the project folder, no --project: as a user re-runs it
    questions = [PICK, PICK, PICK, PRICE, FALLBACK, PICK, KEY]
    defaults = [term.answer(question, "").rsplit("\n", 1)[-1] for question in questions]
    address = term.answer(ADDRESS, "")  # the project's address is the default: Enter keeps it
    llm = term.answer(PICK, "").rsplit("\n", 1)[-1]
    code, shown = term.end()
    assert code == 0, shown
    assert address.endswith(f"[{OPERATOR}]: "), address
    assert defaults == [
        "number or name [ground]: ",
        f"number or name [{POOL}]: ",
        f"number or name [{FLAVOR}]: ",
        f"price per hour of {FLAVOR} (Enter to leave unset): ",
        f"fallback flavors when {FLAVOR} has no capacity, in order (numbers or names, Enter for none): ",
        f"number or name [{IMAGE}]: ",
        f"key [{project / 'id_ed25519'}]: ",
    ]
    assert llm == "number or name [none]: "
    assert {name: (project / name).read_bytes() for name in files} == files


def test_ctrl_c_at_the_flavor_question_writes_nothing_and_exits_130(tmp_path, clouds):
    project = tmp_path / "project"
    term = Terminal(tmp_path, "--project", str(project), clouds=clouds)
    term.answer(PICK, "ground")
    term.answer(PICK, POOL)
    term.interrupt(PICK)
    code, shown = term.end()
    assert "GPU flavor" in shown.rsplit("Pool (availability zone)", 1)[1]  # it was the flavor question
    assert code == 130, shown
    assert "canceled: nothing written" in shown and "Traceback" not in shown
    assert not project.exists()


def test_typed_os_values_a_wrong_password_then_the_right_one(tmp_path, clouds):
    """The OS_* values typed in, the password twice without echo: Keystone refuses the first, takes the second."""
    auth = yaml.safe_load(CLOUDS_YAML.read_text())["clouds"]["ground"]["auth"]
    project = tmp_path / "project"
    term = Terminal(tmp_path, "--project", str(project), clouds=clouds)
    listed = term.answer(PICK, "os-values")
    term.answer(r"auth URL [^\n]*: ", auth["auth_url"])
    term.answer(r"username: ", auth["username"])
    term.answer(r"password \(hidden\): ", SECRET)
    term.answer(r"project name: ", auth["project_name"])
    term.answer(r"user domain \[Default\]: ", auth["user_domain_name"])
    term.answer(r"project domain \[Default\]: ", auth["project_domain_name"])
    term.answer(r"region [^\n]*: ", "")
    refused = term.answer(PICK, "")  # the list again, os-values its default
    again = [term.answer(r"auth URL [^\n]*: ", ""), term.answer(r"username [^\n]*: ", "")]
    again.append(term.answer(r"password \(hidden\): ", auth["password"]))  # the refused one is no default
    for question in (r"project name [^\n]*: ", r"user domain [^\n]*: ", r"project domain [^\n]*: "):
        term.answer(question, "")
    term.answer(r"region [^\n]*: ", "")
    logged_in = term.answer(PICK, POOL)
    term.answer(PICK, FLAVOR)
    term.answer(PRICE, "0.85")
    term.answer(FALLBACK, "")
    term.answer(PICK, IMAGE)
    term.answer(KEY, "new")
    term.answer(ADDRESS, OPERATOR)
    term.answer(PICK, "ollama")
    code, shown = term.end()
    assert code == 0, shown
    assert "os-values: type the OS_* values" in listed and "app-credential" in listed
    assert "refused the login" in refused and refused.count("error:") == 1
    assert "number or name [os-values]: " in refused
    assert auth["auth_url"] in again[0] and f"[{auth['username']}]" in again[1]
    assert f"logged in: OS_AUTH_URL ({auth['auth_url']}), project {auth['project_name']}" in logged_in
    assert "region: RegionOne" in logged_in
    assert SECRET not in shown and auth["password"] not in shown and "Traceback" not in shown  # never echoed
    env = (project / ".env").read_text()
    assert f"OS_AUTH_URL={auth['auth_url']}\n" in env and "OS_CLOUD" not in env
    assert "\nPRICE_PER_HOUR=0.85\n" in (project / "gpu-rent.vars").read_text()
    assert "\nLLM_RUNTIME=ollama\n" in (project / "gpu-rent.vars").read_text()
    assert "ollama: []" in (project / "ollama-models.yaml").read_text()  # the starter: nothing pulled yet
    code, said = doctor(project)
    assert code == 0 and "FAIL" not in said, said
