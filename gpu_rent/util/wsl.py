"""Linux under Windows (WSL2): knowing we run there, and reaching the Windows desktop from it.

In WSL the user's browser and notifications live on Windows, not in the Linux distribution: a Linux
browser or D-Bus is usually absent, so `open` and the notifications go through Windows' own programs,
which WSL runs from Linux (wslview from wslu, explorer.exe, powershell.exe).
"""

from __future__ import annotations

import base64
import contextlib
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

OSRELEASE = Path("/proc/sys/kernel/osrelease")
# Where WSL mounts the Windows drive by default: found there even when appendWindowsPath=false hides Windows' PATH
WINDOWS_TOOLS = {
    "explorer.exe": "/mnt/c/Windows/explorer.exe",
    "powershell.exe": "/mnt/c/Windows/System32/WindowsPowerShell/v1.0/powershell.exe",
}
# Windows PowerShell's own app id: registered on every Windows 10/11, so its toasts show without installing anything
TOAST_APP_ID = r"{1AC14E77-02E7-4E5D-B744-2EB1AE5198B7}\WindowsPowerShell\v1.0\powershell.exe"
# Text nodes, not XML markup: a '<' in the message is shown, never parsed.
TOAST_SCRIPT = """\
$ErrorActionPreference = 'Stop'
$null = [Windows.UI.Notifications.ToastNotificationManager, Windows.UI.Notifications, ContentType = WindowsRuntime]
$null = [Windows.Data.Xml.Dom.XmlDocument, Windows.Data.Xml.Dom.XmlDocument, ContentType = WindowsRuntime]
$toasts = [Windows.UI.Notifications.ToastNotificationManager]
$xml = $toasts::GetTemplateContent([Windows.UI.Notifications.ToastTemplateType]::ToastText02)
$lines = $xml.GetElementsByTagName('text')
$null = $lines.Item(0).AppendChild($xml.CreateTextNode({title}))
$null = $lines.Item(1).AppendChild($xml.CreateTextNode({message}))
$toasts::CreateToastNotifier('{app_id}').Show([Windows.UI.Notifications.ToastNotification]::new($xml))
"""
LAUNCH_SECONDS = 3.0  # a Windows program that has not ended by then is taken as started, never waited for longer

Which = Callable[[str], str | None]
Run = Callable[[list[str]], int | None]  # a command's exit code, None while it still runs


def running_in_wsl(environ: Mapping[str, str] = os.environ, release: str | None = None) -> bool:
    """WSL's kernel says so in its release ("...-microsoft-standard-WSL2"); WSL also sets WSL_DISTRO_NAME."""
    if not sys.platform.startswith("linux"):
        return False
    if environ.get("WSL_DISTRO_NAME"):
        return True
    if release is None:
        release = platform.uname().release
        with contextlib.suppress(OSError):
            release += " " + OSRELEASE.read_text(encoding="utf-8", errors="replace")
    return "microsoft" in release.lower() or "wsl" in release.lower()


def windows_tool(name: str, which: Which = shutil.which) -> str | None:
    found = which(name)
    if found:
        return found
    default = WINDOWS_TOOLS.get(name)
    return default if default and os.path.exists(default) else None


def browser_commands(url: str, which: Which = shutil.which) -> list[list[str]]:
    """The ways to open url in the Windows browser, best first: wslview (wslu) knows the default browser best."""
    commands = []
    wslview = which("wslview")
    if wslview:
        commands.append([wslview, url])
    explorer = windows_tool("explorer.exe", which)
    if explorer:
        commands.append([explorer, url])
    return commands


def _ps_text(text: str) -> str:
    # Base64 holds only [A-Za-z0-9+/=]: nothing in the text can end the string or run as PowerShell.
    encoded = base64.b64encode(text.encode("utf-8")).decode("ascii")
    return f"[Text.Encoding]::UTF8.GetString([Convert]::FromBase64String('{encoded}'))"


def toast_script(title: str, message: str) -> str:
    """PowerShell 5.1 with no modules: a Windows toast through the WinRT notification API."""
    return TOAST_SCRIPT.format(title=_ps_text(title), message=_ps_text(message), app_id=TOAST_APP_ID)


def toast_command(title: str, message: str, which: Which = shutil.which) -> list[str] | None:
    """powershell.exe running the toast script, or None when WSL cannot see powershell.exe."""
    powershell = windows_tool("powershell.exe", which)
    if not powershell:
        return None
    # -EncodedCommand: the script travels as one base64 argument, past every shell and quoting rule in between
    encoded = base64.b64encode(toast_script(title, message).encode("utf-16-le")).decode("ascii")
    return [powershell, "-NoProfile", "-NonInteractive", "-EncodedCommand", encoded]


def launch(command: list[str], timeout: float = LAUNCH_SECONDS) -> int | None:
    """Start command quietly and wait up to timeout: its exit code, or None while it still runs (left running)."""
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def open_in_windows(url: str, which: Which = shutil.which, run: Run = launch) -> bool:
    """Open url in the Windows browser; False when not in WSL or no Windows program could do it."""
    if not running_in_wsl():
        return False
    for command in browser_commands(url, which):
        try:
            code = run(command)
        except OSError:
            continue
        # explorer.exe exits 1 even when it opened the page: that it started is all it can tell
        if code in (0, None) or Path(command[0]).name == "explorer.exe":
            return True
    return False


def toast(title: str, message: str, which: Which = shutil.which, run: Run = launch) -> bool:
    """A Windows toast from WSL; False when not in WSL, or powershell.exe is missing or failed."""
    if not running_in_wsl():
        return False
    command = toast_command(title, message, which)
    if command is None:
        return False
    try:
        return run(command) in (0, None)
    except OSError:
        return False
