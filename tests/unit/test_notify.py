"""Notifications never break or clutter a command where no desktop listens (servers, CI); WSL reaches Windows."""

import asyncio

import pytest

from gpu_rent.util import notify as notify_module
from gpu_rent.util import wsl
from gpu_rent.util.notify import notify


@pytest.fixture(autouse=True)
def not_in_wsl(monkeypatch):
    """The Linux way unless a test says otherwise, even on a developer's WSL."""
    monkeypatch.setattr(wsl, "running_in_wsl", lambda: False)


def test_without_a_desktop_or_terminal_nothing_is_shown_and_nothing_is_printed(monkeypatch, capfd):
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    assert notify("gpu-rent", "ready") == "none"
    assert capfd.readouterr() == ("", "")


def test_a_session_bus_that_does_not_answer_is_survived_quietly(monkeypatch, capfd, tmp_path):
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={tmp_path / 'no-bus'}")
    assert notify("gpu-rent", "ready") == "none"
    assert capfd.readouterr() == ("", "")


def test_a_windows_toast_that_shows_is_the_desktop_one(monkeypatch, capfd):
    shown = []
    monkeypatch.setattr(wsl, "toast", lambda title, message: shown.append((title, message)) or True)
    monkeypatch.setattr(notify_module, "_send", None)  # would raise if called
    assert notify("gpu-rent: SwarmUI is ready", "http://127.0.0.1:17801") == "desktop"
    assert shown == [("gpu-rent: SwarmUI is ready", "http://127.0.0.1:17801")]
    assert capfd.readouterr() == ("", "")


def test_no_windows_toast_falls_back_to_the_linux_way(monkeypatch, capfd):
    monkeypatch.setattr(wsl, "toast", lambda title, message: False)
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    assert notify("gpu-rent", "ready") == "none"
    assert capfd.readouterr() == ("", "")


def test_from_inside_the_tunnels_event_loop_the_desktop_is_still_reached(monkeypatch, capfd):
    """The watchdog notifies from its running loop, where asyncio.run raises: that used to fall to the bell."""
    sent = []

    async def send(title, message):
        sent.append((title, message))
        return True

    monkeypatch.setattr(notify_module, "_send", send)
    monkeypatch.setenv("DISPLAY", ":0")

    async def watchdog():
        return notify("gpu-rent: the VM is back", "http://127.0.0.1:17801")

    assert asyncio.run(watchdog()) == "desktop"
    assert sent == [("gpu-rent: the VM is back", "http://127.0.0.1:17801")]
    assert capfd.readouterr() == ("", "")
