"""Notifications never break or clutter a command where no desktop listens (servers, CI, WSL)."""

from gpu_rent.notify import notify


def test_without_a_desktop_or_terminal_nothing_is_shown_and_nothing_is_printed(monkeypatch, capfd):
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    assert notify("gpu-rent", "ready") == "none"
    assert capfd.readouterr() == ("", "")


def test_a_session_bus_that_does_not_answer_is_survived_quietly(monkeypatch, capfd, tmp_path):
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={tmp_path / 'no-bus'}")
    assert notify("gpu-rent", "ready") == "none"
    assert capfd.readouterr() == ("", "")
