"""How the last VM ended: who deleted it, judged from Nova's delete time and the killer's last report."""

from __future__ import annotations

import time

import pytest

from gpu_rent.rental import vm_end

SERVER = "0b7c1f6e-1d2a-4c8e-9f00-5e1a2b3c4d5e"
T = 1_796_000_000.0  # a unix time


def clock(unix: float) -> str:
    return time.strftime("%H:%M", time.localtime(unix))


def report(**kw) -> dict:
    return {"server_id": SERVER, "tick_at": T, "action": "keep", "reason": "queue empty, idle for 3 min"} | kw


def test_a_report_that_said_deleting_names_the_killer_and_its_reason():
    seen = report(action="delete", reason="queue empty, idle for 30 min: deleting this server", deleted_at=T + 1)
    end = vm_end.judge(SERVER, T + 2, seen)
    assert end["by"] == "idle-killer" and end["at"] == T + 2
    assert (
        vm_end.line(end)
        == f"deleted by the idle-killer at {clock(T + 2)} (queue empty, idle for 30 min: deleting this server)"
    )
    # without Nova's time, the killer's own
    assert vm_end.judge(SERVER, None, seen)["at"] == T + 1


def test_a_delete_at_or_after_the_deadline_the_killer_named_is_the_killers():
    seen = report(fires_at=T + 1620)
    end = vm_end.judge(SERVER, T + 1621, seen)
    assert end["by"] == "idle-killer" and end["source"] == "deadline"
    assert f"its report at {clock(T)}: queue empty, idle for 3 min; fires at {clock(T + 1620)}" in end["reason"]
    # within the slack before it (a tick waits for the deadline to the second; clocks differ a little)
    assert vm_end.judge(SERVER, T + 1620 - 60, seen)["by"] == "idle-killer"


@pytest.mark.parametrize(
    ("deleted_at", "seen"),
    [
        (T + 600, report(fires_at=T + 1620)),  # well before the deadline: someone else
        (T + 600, report(fires_at=None, reason="1 gens running")),  # work kept it: someone else
        (T + 9999, report(server_id="another-server", action="delete")),  # a report of another VM
        (T + 600, None),  # no report on this machine
        (None, report(fires_at=T + 1620)),  # Nova does not say when: nothing to compare
        (T + 4 * 3600, report(fires_at=T + 1620)),  # hours past a stale deadline: work moved it, or a hand
        # a report of a DELETE that failed, and a delete in the cloud's panel hours later
        (T + 4 * 3600, report(action="delete", acted="CREDENTIAL REFUSED, cannot delete this server: ...")),
        (T + 4 * 3600, report(action="delete", acted="delete failed, tried again next tick: Nova: HTTP 503")),
    ],
)
def test_anything_else_is_not_blamed_on_the_killer(deleted_at, seen):
    end = vm_end.judge(SERVER, deleted_at, seen)
    assert end["by"] == "elsewhere" and end["reason"] is None
    line = vm_end.line(end)
    assert line.startswith(f"deleted at {clock(deleted_at)}, not by gpu-rent stop" if deleted_at else "deleted (time")
    assert "the next `gpu-rent up` shows its last words" in line


def test_the_killers_own_last_words_are_the_whole_truth():
    words = {"server_id": SERVER, "at": T, "deleted_at": T + 0.4, "reason": "queue empty, idle for 30 min"}
    end = vm_end.from_last_words(words)
    assert end == {"server_id": SERVER, "at": T + 0.4, "by": "idle-killer", "reason": words["reason"],
                   "source": "last words"}  # fmt: skip
    # written before the DELETE and not after (the guest went first): the time it decided
    assert vm_end.from_last_words({"server_id": SERVER, "at": T, "reason": "r", "acted": "deleting"})["at"] == T


def test_gpu_rent_names_its_own_ends():
    assert vm_end.line(vm_end.stopped(SERVER, T)) == f"deleted by gpu-rent stop at {clock(T)}"
    assert vm_end.line(vm_end.stopped(SERVER, T, "destroy")) == f"deleted by gpu-rent destroy at {clock(T)}"


def test_damaged_values_never_break_the_line():
    assert vm_end.judge(SERVER, T, report(tick_at="soon", fires_at=True))["by"] == "elsewhere"
    assert vm_end.line({"by": "idle-killer", "at": "x"}) == "deleted by the idle-killer (time unknown)"


def test_a_gone_server_is_settled_once_and_an_end_kept_for_it_stands(tmp_path):
    vm_end.write(tmp_path, vm_end.SEEN_FILE, report(action="delete", deleted_at=T + 1))
    end = vm_end.settle(tmp_path, None, SERVER)  # no cloud to ask: the report's own time
    assert end["by"] == "idle-killer" and end["at"] == T + 1
    assert vm_end.read(tmp_path, vm_end.END_FILE) == end
    vm_end.write(tmp_path, vm_end.END_FILE, vm_end.stopped(SERVER, T + 5))  # stop's own end, kept first
    assert vm_end.settle(tmp_path, None, SERVER)["by"] == "gpu-rent stop"
    assert vm_end.settle(tmp_path, None, "another-server")["by"] == "elsewhere"  # another server: judged anew


def test_the_files_are_written_whole_and_a_damaged_one_reads_as_none(tmp_path):
    vm_end.write(tmp_path / "rt", vm_end.END_FILE, {"a": 1})
    assert vm_end.read(tmp_path / "rt", vm_end.END_FILE) == {"a": 1}
    (tmp_path / "rt" / vm_end.SEEN_FILE).write_text("[1, 2")
    assert vm_end.read(tmp_path / "rt", vm_end.SEEN_FILE) is None
    (tmp_path / "file-not-dir").write_text("")
    vm_end.write(tmp_path / "file-not-dir", "y", {})  # never fatal
    vm_end.write(tmp_path / "file-not-dir" / "x", "y", {})


def test_novas_delete_time_is_read_from_the_instance_actions_of_the_deleted_server():
    # the shape of GET /servers/{id}/os-instance-actions (compute API reference), newest first;
    # the call itself is made on the ground's real Nova (tests/ground/test_rental.py)
    body = {"instanceActions": [
        {"action": "delete", "start_time": "2026-12-02T08:40:56.000000", "user_id": "u", "request_id": "req-2"},
        {"action": "create", "start_time": "2026-12-02T08:40:20.000000", "user_id": "u", "request_id": "req-1"},
    ]}  # fmt: skip
    assert vm_end.delete_time(body) == 1796200856.0
    assert vm_end.delete_time({"instanceActions": body["instanceActions"][1:]}) is None
    assert vm_end.delete_time({"instanceActions": [{"action": "delete", "start_time": "yesterday"}]}) is None
    assert vm_end.delete_time({}) is None and vm_end.delete_time([]) is None
