"""A tick never waits on the data volume for long (idle_look.in_a_child, idle_killer.look_at_disk).

The data volume is a network disk: a read that hangs there blocks in the kernel, out of reach of any
signal or Python timeout. The killer reads it (downloads under Models, the hold, its mount and marker)
in a forked child it waits for a few seconds only; silence counts as trouble, which is capped, so a
stuck disk ends in a delete instead of a VM whose ticks all hang. Here the hang is a child that sleeps
(interruptible, unlike a D-state read, but just as silent to the parent).
"""

from __future__ import annotations

import os
import stat
import time

import pytest

from gpu_rent.on_vm import idle_killer
from gpu_rent.on_vm.idle_look import in_a_child
from tests.unit.test_idle_killer_program import config, swarm  # noqa: F401 - the fixture


def test_a_childs_answer_comes_back_as_it_was():
    assert in_a_child(lambda: {"downloads": ["Lora/a.tmp"], "hold_until": 12.5}, 5) == {
        "downloads": ["Lora/a.tmp"],
        "hold_until": 12.5,
    }


def test_a_look_that_fails_is_an_oserror_in_the_parent():
    def look():
        raise PermissionError("denied")

    with pytest.raises(OSError, match="PermissionError: denied"):
        in_a_child(look, 5)


def test_a_silent_look_is_given_up_after_its_seconds_and_holds_no_descriptor_of_the_parents(tmp_path):
    lock = open(tmp_path / "lock", "w")  # noqa: SIM115 - held open across the child, as the status lock is
    started = time.monotonic()
    assert in_a_child(lambda: time.sleep(30), 0.5) is None
    assert time.monotonic() - started < 3
    assert os.fstat(lock.fileno())  # still the parent's
    lock.close()


def test_a_tick_on_a_hung_data_volume_ends_in_seconds_counting_it_as_capped_trouble(tmp_path, swarm, monkeypatch):  # noqa: F811
    monkeypatch.setattr(idle_killer, "data_volume_problem", lambda mount, marker: time.sleep(60))
    cfg = config(tmp_path, swarm.port, disk_seconds=1, data_mount="/mnt/swarm_data")
    started = time.monotonic()
    status = idle_killer.tick(cfg, say=print)
    assert time.monotonic() - started < 10
    assert status["action"] == "keep", status
    assert status["reason"].startswith(
        "data volume at /mnt/swarm_data did not answer within 1 s (a stuck network disk?): counted as busy for"
    ), status["reason"]
    assert status["memory"]["troubled_since"] == status["tick_at"]
    again = idle_killer.tick(cfg, say=print)  # the child left behind holds no lock: the next tick goes on
    assert again["memory"]["troubled_since"] == status["tick_at"], again


def test_the_child_keeps_no_descriptor_but_its_pipe_and_a_torn_answer_is_a_failed_look(tmp_path):
    lock = open(tmp_path / "lock", "w")  # noqa: SIM115 - as the status lock is held across the child
    fds = in_a_child(lambda: sorted(int(fd) for fd in os.listdir("/proc/self/fd")), 5)
    lock.close()
    assert fds[:3] == [0, 1, 2] and len(fds) <= 5, fds  # stdio, its pipe's end, and listdir's own

    def torn():  # half an answer into the child's one pipe, then gone: as a child killed mid-write
        pipe = next(fd for fd in range(3, 64) if _is_pipe(fd))
        os.write(pipe, b'{"answer": [1, 2')
        os._exit(0)

    with pytest.raises(OSError):
        in_a_child(torn, 5)


def test_a_slow_walk_of_models_never_hides_the_hold(tmp_path, swarm, monkeypatch):  # noqa: F811
    monkeypatch.setattr(idle_killer, "fresh_downloads", lambda dirs, now: time.sleep(60))
    (tmp_path / "hold").write_text(f"{time.time() + 600:.0f} 11111111-2222-3333-4444-555555555555\n")
    cfg = config(tmp_path, swarm.port, disk_seconds=1)
    status = idle_killer.tick(cfg, say=print)
    assert status["reason"].startswith("hold for 10 min more"), status["reason"]


def _is_pipe(fd: int) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False
