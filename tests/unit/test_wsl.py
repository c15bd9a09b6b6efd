"""WSL2: knowing we run there, and the Windows programs `open` and the notifications start (never run here)."""

from __future__ import annotations

import base64
import re
import sys

import pytest

from gpu_rent.util import wsl

URL = "http://127.0.0.1:17801"
WSLVIEW, EXPLORER, POWERSHELL = "/usr/bin/wslview", "/mnt/c/Windows/explorer.exe", "/mnt/c/ps/powershell.exe"


def which_of(*found: str):
    """A PATH lookup that finds exactly these programs."""
    paths = {WSLVIEW.rsplit("/", 1)[1]: WSLVIEW, "explorer.exe": EXPLORER, "powershell.exe": POWERSHELL}
    return lambda name: paths[name] if name in found else None


@pytest.fixture
def in_wsl(monkeypatch):
    monkeypatch.setattr(wsl, "running_in_wsl", lambda: True)
    # the Windows drive's default places hold nothing here: only the injected PATH lookup finds programs
    monkeypatch.setattr(wsl, "WINDOWS_TOOLS", {})


class Runs:
    """Records the commands it is given and answers each with the next exit code (or raises it)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.commands: list[list[str]] = []

    def __call__(self, command: list[str]) -> int | None:
        self.commands.append(command)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


# --- knowing we run in WSL -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "release", "expected"),
    [
        ({"WSL_DISTRO_NAME": "Ubuntu"}, "6.1.0-28-amd64", True),
        ({}, "5.15.167.4-microsoft-standard-WSL2", True),
        ({}, "4.4.0-19041-Microsoft", True),  # WSL1
        ({}, "6.1.0-28-amd64", False),
        ({"WSL_DISTRO_NAME": ""}, "6.8.0-49-generic", False),
    ],
)
def test_wsl_is_known_by_its_kernel_release_or_its_variable(environ, release, expected):
    assert wsl.running_in_wsl(environ, release) is expected


def test_outside_linux_there_is_no_wsl(monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")
    assert wsl.running_in_wsl({"WSL_DISTRO_NAME": "Ubuntu"}, "microsoft-standard-WSL2") is False


# --- the browser -----------------------------------------------------------------------------------------------------


def test_wslview_comes_first_then_explorer(in_wsl):
    assert wsl.browser_commands(URL, which_of("wslview", "explorer.exe")) == [[WSLVIEW, URL], [EXPLORER, URL]]
    assert wsl.browser_commands(URL, which_of("explorer.exe")) == [[EXPLORER, URL]]
    assert wsl.browser_commands(URL, which_of()) == []


def test_explorer_is_found_on_the_windows_drive_when_path_hides_it(monkeypatch, tmp_path):
    explorer = tmp_path / "explorer.exe"
    explorer.touch()
    monkeypatch.setattr(wsl, "WINDOWS_TOOLS", {"explorer.exe": str(explorer)})
    assert wsl.browser_commands(URL, which_of()) == [[str(explorer), URL]]


def test_explorer_exit_code_1_is_success(in_wsl):
    run = Runs(1)
    assert wsl.open_in_windows(URL, which_of("explorer.exe"), run) is True
    assert run.commands == [[EXPLORER, URL]]


def test_a_failing_wslview_falls_back_to_explorer(in_wsl):
    run = Runs(2, 1)
    assert wsl.open_in_windows(URL, which_of("wslview", "explorer.exe"), run) is True
    assert run.commands == [[WSLVIEW, URL], [EXPLORER, URL]]


@pytest.mark.parametrize("answer", [0, None])  # None: still running after the wait, taken as started
def test_wslview_that_works_is_the_only_one_started(in_wsl, answer):
    run = Runs(answer)
    assert wsl.open_in_windows(URL, which_of("wslview", "explorer.exe"), run) is True
    assert run.commands == [[WSLVIEW, URL]]


def test_no_windows_program_that_starts_leaves_it_to_python(in_wsl):
    assert wsl.open_in_windows(URL, which_of("wslview", "explorer.exe"), Runs(OSError(), OSError())) is False
    assert wsl.open_in_windows(URL, which_of(), Runs()) is False


def test_outside_wsl_no_windows_program_is_started(monkeypatch):
    monkeypatch.setattr(wsl, "running_in_wsl", lambda: False)
    run = Runs()
    assert wsl.open_in_windows(URL, which_of("wslview", "explorer.exe"), run) is False
    assert wsl.toast("t", "m", which_of("powershell.exe"), run) is False
    assert run.commands == []


def test_open_uses_the_windows_browser_in_wsl_and_python_elsewhere(monkeypatch, tmp_path):
    import webbrowser

    from typer.testing import CliRunner

    from gpu_rent.cli import tunnel as cli_tunnel
    from gpu_rent.cli.app import app

    monkeypatch.setattr(cli_tunnel, "load_settings", lambda project: None)
    monkeypatch.setattr(cli_tunnel, "open_tunnel", lambda settings: {"url": URL})
    opened = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(("python", url)) or True)
    for windows in (True, False):
        monkeypatch.setattr(wsl, "open_in_windows", lambda url, w=windows: opened.append(("windows", url)) or w)
        result = CliRunner().invoke(app, ["open", "-p", str(tmp_path)])
        assert result.exit_code == 0, result.output
    assert opened == [("windows", URL), ("windows", URL), ("python", URL)]


# --- the notification ------------------------------------------------------------------------------------------------

HOSTILE = ["'; Remove-Item -Recurse C:\\ ; '", "$(Start-Process calc)", '`n"quoted" <b>&amp;</b>', "ещё ✓"]


def script_of(command: list[str]) -> str:
    assert command[:4] == [POWERSHELL, "-NoProfile", "-NonInteractive", "-EncodedCommand"]
    assert len(command) == 5
    return base64.b64decode(command[4]).decode("utf-16-le")


@pytest.mark.parametrize("text", HOSTILE)
def test_the_text_reaches_powershell_only_as_base64(in_wsl, text):
    script = script_of(wsl.toast_command(f"title {text}", f"message {text}", which_of("powershell.exe")))
    assert text not in script
    literals = re.findall(r"FromBase64String\('([^']*)'\)", script)
    assert [base64.b64decode(x).decode("utf-8") for x in literals] == [f"title {text}", f"message {text}"]
    # every quote is the fixed script's or one of the two literals' own: none came with the text
    assert script.count("'") == wsl.TOAST_SCRIPT.count("'") + 4


def test_the_toast_needs_no_module():
    script = wsl.toast_script("t", "m")
    assert "Import-Module" not in script and "BurntToast" not in script
    assert "ToastNotificationManager" in script and wsl.TOAST_APP_ID in script


def test_without_powershell_there_is_no_toast(in_wsl):
    assert wsl.toast_command("t", "m", which_of()) is None
    assert wsl.toast("t", "m", which_of(), Runs()) is False


@pytest.mark.parametrize(("answer", "shown"), [(0, True), (None, True), (1, False), (OSError(), False)])
def test_the_toast_counts_as_shown_unless_powershell_failed(in_wsl, answer, shown):
    run = Runs(answer)
    assert wsl.toast("t", "m", which_of("powershell.exe"), run) is shown
    assert script_of(run.commands[0]) == wsl.toast_script("t", "m")
