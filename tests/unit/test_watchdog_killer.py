"""The watchdog acts on the killer's report only while it reads it: a read that fails (SSH down or slow, a
reboot's empty /run, a laptop just awake) forgets the report, so an old one is never taken for silence and
a VM at work is never deleted by the laptop (watch/watchdog.py _keep_killer_report, _judge_killer)."""

from __future__ import annotations

import asyncio
import time

import pytest

from gpu_rent.project import settings as config
from gpu_rent.watch import watchdog


class Refusing:
    """Rental as the watchdog would build it: the test fails if it is asked to stop anything."""

    def __init__(self, *args, **kwargs):
        pass

    def stop(self):
        raise AssertionError("the watchdog deleted the server")


@pytest.fixture
def session(dead_cloud_project, monkeypatch):
    monkeypatch.setattr(watchdog, "Rental", Refusing)
    monkeypatch.setattr(watchdog, "notify", lambda *a: None)
    said: list[str] = []
    s = watchdog.Session(config.load(dead_cloud_project, with_cloud=False), said.append, forward=False)
    s.server_id = "s1"
    return s


def test_a_report_not_read_again_is_forgotten_and_never_judged_as_silence(session):
    # idle, firing in a minute, read 20 minutes ago: then the reads failed (no connection here)
    session._report = {"server_id": "s1", "tick_at": 1.0, "tick_seconds": 60, "action": "keep",
                       "reason": "queue empty", "fires_at": 61.0, "credential": {"state": "ok"}}  # fmt: skip
    session._report_seen_at = time.time() - 1200
    asyncio.run(session._keep_killer_report())
    assert session._report is None
    asyncio.run(session._judge_killer())  # nothing to judge: Refusing.stop would fail the test


def test_a_refused_killer_is_not_deleted_when_the_project_names_another_server(session, monkeypatch):
    said: list[str] = []
    session._log = said.append
    session._report = {"server_id": "s1", "tick_at": 1.0, "action": "delete", "reason": "idle",
                       "acted": "CREDENTIAL REFUSED, cannot delete this server: no"}  # fmt: skip
    session._report_seen_at = time.time()
    session.store.path.parent.mkdir(parents=True, exist_ok=True)
    session.store.path.write_text('{"phase": "ready_tunneled", "resources": {"server": "s2"}}')
    asyncio.run(session._judge_killer())
    assert any("not deleted: the project now names server s2, not s1" in line for line in said), said
    assert session._report is None  # done with: not judged again at every tick


class Deleting:
    """Rental as the watchdog would build it, counting its stops; the first `fail` of them fail."""

    stops = 0
    fail = 0

    def __init__(self, *args, **kwargs):
        pass

    def stop(self):
        Deleting.stops += 1
        if Deleting.stops <= Deleting.fail:
            raise OSError("the cloud did not answer")


def test_a_server_in_error_is_deleted_with_the_volumes_kept_and_the_session_ends(session, monkeypatch):
    """Nothing on a failed server can delete it and a cloud may bill it (money review #14): the watchdog ends
    it as stop does, says who in the end file status reads, and exits; a delete that fails is tried again."""
    Deleting.stops, Deleting.fail = 0, 1
    monkeypatch.setattr(watchdog, "Rental", Deleting)
    said: list[str] = []
    session._log = said.append
    session.store.path.parent.mkdir(parents=True, exist_ok=True)
    session.store.path.write_text('{"phase": "ready_tunneled", "resources": {"server": "s1"}}')
    told: list[str] = []
    monkeypatch.setattr(watchdog, "notify", lambda title, body: told.append(body))
    verdict = watchdog.judge("ERROR", "error", None, "disk gone")
    why = verdict.why
    asyncio.run(session._end_failed(verdict))  # the delete failed: no end yet, the next tick tries again
    with pytest.raises(watchdog.SessionEnded, match="the server is in ERROR"):
        asyncio.run(session._end_failed(verdict))
    assert Deleting.stops == 2 and told == [why]  # the user is told once, not at every try
    end = watchdog.vm_end.read(session.settings.runtime_dir, watchdog.vm_end.END_FILE)
    assert end["server_id"] == "s1" and end["by"] == "gpu-rent watchdog" and "ERROR" in end["reason"], end
    assert any("deleting the server with your credential (the volumes stay)" in line for line in said), said


def test_a_server_in_error_the_project_no_longer_names_is_left_and_the_end_says_so(session, monkeypatch):
    monkeypatch.setattr(watchdog, "Rental", Refusing)
    session.store.path.parent.mkdir(parents=True, exist_ok=True)
    session.store.path.write_text('{"phase": "ready_tunneled", "resources": {"server": "s2"}}')
    verdict = watchdog.judge("ERROR", "error", None, "disk gone")
    with pytest.raises(watchdog.SessionEnded) as ended:
        asyncio.run(session._end_failed(verdict))
    said = str(ended.value)
    assert said.startswith("the server is in ERROR (status ERROR, vm_state error, task_state -; fault: disk gone)")
    assert "not deleted (the project now names another server)" in said and "deleting it" not in said


def test_a_delete_that_failed_keeps_the_report_for_the_next_tick(session, monkeypatch):
    """The report a failed delete acted on stays: the next tick tries again, its silence not counted anew."""
    Deleting.stops, Deleting.fail = 0, 1
    monkeypatch.setattr(watchdog, "Rental", Deleting)
    report = {"server_id": "s1", "tick_at": 1.0, "action": "delete", "reason": "idle",
              "acted": "CREDENTIAL REFUSED, cannot delete this server: no"}  # fmt: skip
    session._report, session._report_seen_at = report, time.time()
    session.store.path.parent.mkdir(parents=True, exist_ok=True)
    session.store.path.write_text('{"phase": "ready_tunneled", "resources": {"server": "s1"}}')
    asyncio.run(session._judge_killer())
    assert Deleting.stops == 1 and session._report is report
    asyncio.run(session._judge_killer())
    assert Deleting.stops == 2 and session._report is None
