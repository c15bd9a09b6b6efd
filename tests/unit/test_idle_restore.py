"""A VM back with the memory of its life before (a preemption's restore, a reboot): idle_decision's restore rules.

The killer keeps its memory on the boot volume (idle_killer.restore), with the time it was down taken out of
the idle clock, and tells decide() when the VM came back (Observation.restored_at). Then no boot grace
starts again: the clock goes on from where it stood; for the short restore grace the VM is not deleted
and trouble (SwarmUI coming back) does not count; work restarts the clock as always.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from gpu_rent.on_vm import idle_killer
from gpu_rent.on_vm.idle_decision import DELETE, KEEP, Memory
from tests.unit.test_idle_decision import LATE, LIMITS, MIN, run, seen
from tests.unit.test_idle_killer_program import config, swarm  # noqa: F401 - the fixture

GRACE = replace(LIMITS, restore_grace_seconds=10 * MIN)
BACK = LATE + 100 * MIN  # restored here, 25 minutes of idleness remembered from before (shifted past the downtime)
REMEMBERED = Memory(idle_since=BACK - 25 * MIN)


def test_an_idle_vm_restored_goes_when_its_idle_time_left_and_the_restore_grace_have_both_run():
    ticks = [seen(BACK + m * MIN, restored_at=BACK) for m in range(0, 11)]
    decisions = run(ticks, REMEMBERED, GRACE)
    # 5 min of idleness were left, but the restore's grace is 10: kept until it ends, then deleted
    assert [d.action for d in decisions] == [KEEP] * 10 + [DELETE]
    assert decisions[0].fires_at == BACK + 10 * MIN
    assert decisions[0].reason == "queue empty, idle for 25 min; grace after a restore, 10 min left"
    assert "idle for 35 min" in decisions[10].reason


def test_a_restore_grace_shorter_than_the_idle_time_left_changes_nothing():
    ticks = [seen(BACK + m * MIN, restored_at=BACK) for m in (0, 20)]
    decisions = run(ticks, Memory(idle_since=BACK - 10 * MIN), GRACE)
    assert decisions[0].fires_at == BACK + 20 * MIN and [d.action for d in decisions] == [KEEP, DELETE]


def test_swarmui_coming_back_after_the_restore_keeps_the_idle_clock_running():
    ticks = [seen(BACK, restored_at=BACK, status=None, error="connection refused"),
             seen(BACK + 3 * MIN, restored_at=BACK, status=None, error="connection refused"),
             seen(BACK + 4 * MIN, restored_at=BACK)]  # fmt: skip
    decisions = run(ticks, REMEMBERED, GRACE)
    assert decisions[0].reason.startswith("grace after a restore, 10 min left (SwarmUI not answering")
    assert decisions[1].memory.idle_since == BACK - 25 * MIN and decisions[1].memory.troubled_since is None
    assert decisions[2].memory.idle_since == BACK - 25 * MIN and decisions[2].fires_at == BACK + 10 * MIN


def test_work_after_the_restore_restarts_the_clock_as_always():
    ticks = [seen(BACK + 2 * MIN, restored_at=BACK, status=seen().status | {"status": {"live_gens": 1}}),
             seen(BACK + 3 * MIN, restored_at=BACK)]  # fmt: skip
    decisions = run(ticks, REMEMBERED, GRACE)
    assert decisions[0].action == KEEP and decisions[0].reason.startswith("1 live gens")
    assert decisions[1].memory.idle_since == BACK + 3 * MIN and decisions[1].fires_at == BACK + 33 * MIN


def test_trouble_past_the_restore_grace_is_capped_as_always():
    ticks = [seen(BACK + 11 * MIN, restored_at=BACK, status=None, error="refused")]
    [decision] = run(ticks, REMEMBERED, GRACE)
    assert decision.reason.startswith("SwarmUI not answering") and decision.memory.troubled_since == BACK + 11 * MIN


# ------------------------------------------------------------------ the program: the memory on the boot volume
def boot(tmp_path: Path, pid1_started: int) -> str:
    """A /proc of a boot: one kernel (a container's boots share its boot_id), PID 1 started at pid1_started."""
    proc = tmp_path / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (proc / "sys/kernel/random/boot_id").write_text("7c1c3d40-0b2e-4c6e-9d43-2f1f0b2a9e11\n")
    (proc / "1").mkdir(exist_ok=True)
    fields = ["S"] + ["0"] * 18 + [str(pid1_started)] + ["0"] * 30  # field 22 (starttime) after "pid (comm) "
    (proc / "1/stat").write_text(f"1 (systemd) {' '.join(fields)}\n")
    return str(proc)


def test_a_new_boot_of_the_same_life_goes_on_from_the_memory_on_the_boot_volume(tmp_path, swarm):  # noqa: F811
    cfg = config(tmp_path, swarm.port, idle_seconds=1800, grace_seconds=2700, restore_grace_seconds=600,
                 proc_root=boot(tmp_path, 1000))  # fmt: skip
    booted = idle_killer.tick(cfg, now=cfg.armed_at, say=lambda _: None)["booted_at"]
    t0 = cfg.armed_at + 3600  # past the boot's grace
    first = idle_killer.tick(cfg, now=t0, say=lambda _: None)
    assert first["memory"]["idle_since"] == t0 and first["restored_at"] is None
    idle_killer.tick(cfg, now=t0 + 25 * MIN, say=lambda _: None)  # idle for 25 min, then preempted
    Path(cfg.status_file).unlink()  # /run is empty after the restore's boot
    boot(tmp_path, 2000)  # a new boot, on the same kernel as the ground's containers
    back = t0 + 25 * MIN + 3 * 3600  # three hours down
    after = idle_killer.tick(cfg, now=back, say=lambda _: None)
    assert after["restored_at"] == back and after["booted_at"] == first["booted_at"] == booted
    assert after["memory"]["idle_since"] == back - 25 * MIN  # the hours it was down are no idleness
    assert after["reason"] == "queue empty, 1 of 1 ComfyUI backend running, idle for 25 min; grace after a " \
        "restore, 10 min left", after["reason"]  # fmt: skip
    assert after["fires_at"] == back + 10 * MIN
    later = idle_killer.tick(cfg, now=back + 10 * MIN, say=lambda _: None)
    assert later["action"] == "delete" and later["restored_at"] == back  # kept for the rest of this boot


def test_the_memory_of_another_server_or_another_arming_is_a_fresh_start(tmp_path, swarm):  # noqa: F811
    cfg = config(tmp_path, swarm.port, idle_seconds=1800, grace_seconds=2700)
    idle_killer.tick(cfg, now=cfg.armed_at, say=lambda _: None)
    kept = Path(cfg.memory_file)
    for other in ({"server_id": "the-vm-before"}, {"armed_at": cfg.armed_at - 1}):
        kept.write_text(json.dumps(json.loads(kept.read_text()) | other))
        Path(cfg.status_file).unlink()
        fresh = idle_killer.tick(cfg, now=cfg.armed_at + 7200, say=lambda _: None)
        assert fresh["restored_at"] is None and fresh["booted_at"] == cfg.armed_at + 7200, other


def test_an_arming_after_the_restore_is_a_fresh_start(tmp_path, swarm):  # noqa: F811
    cfg = config(tmp_path, swarm.port, idle_seconds=1800, grace_seconds=2700, proc_root=boot(tmp_path, 1000))
    idle_killer.tick(cfg, now=cfg.armed_at, say=lambda _: None)
    idle_killer.tick(cfg, now=cfg.armed_at + 3600, say=lambda _: None)
    Path(cfg.status_file).unlink()
    boot(tmp_path, 2000)
    back = idle_killer.tick(cfg, now=cfg.armed_at + 7200, say=lambda _: None)
    assert back["restored_at"] == cfg.armed_at + 7200
    path = tmp_path / "idle-killer.json"  # up arms it again (another config): its grace, no restore's
    os.utime(path, (cfg.armed_at + 7300, cfg.armed_at + 7300))
    rearmed = idle_killer.Config.load(path)
    again = idle_killer.tick(rearmed, now=cfg.armed_at + 7400, say=lambda _: None)
    assert again["restored_at"] is None and again["reason"].startswith("grace after boot, 43 min left"), again


def test_a_run_that_cannot_be_written_keeps_the_clock_from_the_boot_volume(tmp_path, swarm, monkeypatch):  # noqa: F811
    """A full /run (money review #13): the status write fails after each look; without the memory on the boot
    volume every tick would find the stale record and start the idle clock anew, and never delete."""
    cfg = config(tmp_path, swarm.port, idle_seconds=1800, grace_seconds=0, proc_root=boot(tmp_path, 1000))
    t0 = cfg.armed_at + 60
    partial = tmp_path / "Models" / "flux.download.tmp"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"\0")
    os.utime(partial, (t0, t0))
    assert idle_killer.tick(cfg, now=t0, say=lambda _: None)["memory"]["idle_since"] is None  # work in /run's record
    partial.unlink()
    run_dir = str(Path(cfg.status_file).parent)
    opened = os.fdopen

    class Full:  # a file in the full /run: made, but nothing can be written to it
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, _text):
            raise OSError(28, "No space left on device")

    def fdopen(fd, *args, **kwargs):
        f = opened(fd, *args, **kwargs)
        return Full(f) if os.readlink(f"/proc/self/fd/{fd}").startswith(run_dir) else f

    monkeypatch.setattr(idle_killer.os, "fdopen", fdopen)
    said: list[str] = []
    ticks = [idle_killer.tick(cfg, now=t0 + m * MIN, say=said.append) for m in range(1, 32)]
    assert {t["memory"]["idle_since"] for t in ticks} == {t0 + MIN}  # the clock never restarts
    assert [t["action"] for t in ticks] == ["keep"] * 30 + ["delete"]
    assert ticks[-1]["restored_at"] is None  # no restore's grace: the VM never went down
    assert not Path(cfg.status_file).exists() and not list(Path(cfg.status_file).parent.glob("*.partial"))
    assert said[1].startswith(f"<4>status not written to {cfg.status_file} ([Errno 28] No space left on device)")


def test_without_a_boot_to_tell_apart_a_lost_status_is_a_restore(tmp_path, swarm):  # noqa: F811
    """A /proc that says nothing (no boot_id): a status gone from /run is taken as a new boot, as before."""
    cfg = config(tmp_path, swarm.port, idle_seconds=1800, grace_seconds=0, proc_root=str(tmp_path / "no-proc"))
    idle_killer.tick(cfg, now=cfg.armed_at + 60, say=lambda _: None)
    Path(cfg.status_file).unlink()
    assert idle_killer.tick(cfg, now=cfg.armed_at + 120, say=lambda _: None)["restored_at"] == cfg.armed_at + 120
