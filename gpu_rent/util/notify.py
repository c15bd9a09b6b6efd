"""A desktop notification when a long step ends (SwarmUI ready, the VM back after a preemption).

desktop-notifier speaks each platform's own service (Windows toasts, macOS Notification Center,
freedesktop D-Bus on Linux); in WSL the desktop is Windows', reached through powershell.exe; where none
answers (a server, CI), a terminal bell. A cancel never notifies (the user is at the keyboard).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading

from gpu_rent.util import wsl

APP = "gpu-rent"
TIMEOUT = 3.0  # a notifier that does not answer must not hold up the command


def _has_desktop() -> bool:
    """Linux without a session bus (a server, CI, WSL without a desktop) has no one to show a toast."""
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DBUS_SESSION_BUS_ADDRESS") or os.environ.get("DISPLAY"))
    return True


class _Failures(logging.Handler):
    """desktop-notifier logs a failed send and returns as if shown: its log is how we learn the truth."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record)


async def _send(title: str, message: str) -> bool:
    from desktop_notifier import DesktopNotifier

    log = logging.getLogger("desktop_notifier")
    failures = _Failures()
    log.addHandler(failures)
    log.propagate = False  # its tracebacks are not for the user's terminal
    try:
        notifier = DesktopNotifier(app_name=APP)
        await asyncio.wait_for(notifier.send(title=title, message=message), TIMEOUT)
    finally:
        log.removeHandler(failures)
    return not failures.seen


def _sent(title: str, message: str) -> bool:
    """_send to its end, also from inside a running event loop (the tunnel's watchdog), where asyncio.run raises."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_send(title, message))
    done: list[bool] = []
    worker = threading.Thread(target=lambda: done.append(asyncio.run(_send(title, message))), daemon=True)
    worker.start()
    worker.join(TIMEOUT + 1)  # the loop waits at most this: a notifier that hangs is left behind
    return bool(done and done[0])


def notify(title: str, message: str) -> str:
    """Show it; returns how: "desktop", "bell" or "none" (no notifier and no terminal)."""
    with contextlib.suppress(Exception):  # WSL interop switched off, a Windows that refuses: the Linux way then
        if wsl.toast(title, message):
            return "desktop"
    with contextlib.suppress(Exception):  # no D-Bus session, no notification service, no permission
        if _has_desktop() and _sent(title, message):
            return "desktop"
    if sys.stderr.isatty():
        sys.stderr.write("\a")
        sys.stderr.flush()
        return "bell"
    return "none"
