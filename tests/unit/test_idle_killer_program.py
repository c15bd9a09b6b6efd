"""The idle-killer program's looking and recording, against the SwarmUI stand-in on loopback.

What it decides is tested rule by rule in test_idle_decision.py; deleting the server through a real
Keystone and Nova, from a real VM, in tests/ground/test_idle_killer.py. Here: that a tick sees what
the VM shows (SwarmUI's global counters, ComfyUI's own queue, partial downloads, lock and hold files),
records it without secrets, and says it in one journal line.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from gpu_rent import idle_killer
from gpu_rent.idle_killer import Config, Unreachable, endpoint, fresh_downloads, read_time
from tests.unit.test_swarmui_standin import free_port, start, stop, wait_for

SECRET = "s3cret-never-in-the-status"


def config(tmp_path: Path, swarm_port: int, comfy_port: int | None = None, **kw) -> Config:
    data = {
        "server_id": "11111111-2222-3333-4444-555555555555",
        "auth_url": f"http://127.0.0.1:{free_port()}/v3",  # nothing listens: Keystone unreachable
        "credential_id": "cred",
        "credential_secret": SECRET,
        "idle_seconds": 600,
        "grace_seconds": 0,
        "cap_seconds": 1200,
        "swarmui_url": f"http://127.0.0.1:{swarm_port}",
        "comfy_ports": [comfy_port] if comfy_port else [],
        "models_dirs": [str(tmp_path / "Models")],
        "hold_file": str(tmp_path / "hold"),
        "seeding_lock": str(tmp_path / "seeding"),
        "status_file": str(tmp_path / "run" / "idle-killer.json"),
        "credential_check_seconds": 1e12,  # no credential check in these ticks
    } | kw
    path = tmp_path / "idle-killer.json"
    path.write_text(json.dumps(data))
    return Config.load(path)


@pytest.fixture
def swarm(tmp_path):
    swarm, proc = start(tmp_path / "SwarmUI")
    wait_for(lambda: swarm.post("/API/GetGlobalStatus")["backend_status"]["status"] == "running")
    yield swarm
    stop(proc)


def tick(cfg: Config) -> tuple[dict, list[str]]:
    said: list[str] = []
    return idle_killer.tick(cfg, say=said.append), said


def test_a_quiet_vm_starts_the_clock_and_the_status_file_holds_no_secret(tmp_path, swarm):
    cfg = config(tmp_path, swarm.port)
    status, said = tick(cfg)
    assert status["action"] == "keep" and status["reason"].startswith("queue empty")
    assert status["fires_at"] == pytest.approx(status["tick_at"] + 600)
    assert said[0].startswith("<6>keep: queue empty") and "fires at" in said[0]
    text = Path(cfg.status_file).read_text()
    assert SECRET not in text and json.loads(text)["memory"]["idle_since"] == status["tick_at"]
    assert Path(cfg.status_file).stat().st_mode & 0o777 == 0o644
    # the next tick reuses the session and keeps the clock where it started
    again, _ = tick(cfg)
    assert again["session_id"] == status["session_id"] and again["fires_at"] == status["fires_at"]


def test_generations_queued_in_swarmui_by_another_session_keep_the_vm(tmp_path, swarm):
    cfg = config(tmp_path, swarm.port)
    swarm.post("/StandinTest/QueueGeneration", {"session_id": swarm.session, "seconds": 5, "count": 2})
    status, said = tick(cfg)
    assert status["action"] == "keep" and status["fires_at"] is None
    assert "gens" in status["reason"] and "gens" in said[0]


def test_prompts_sent_to_comfyui_directly_keep_the_vm(tmp_path, swarm):
    cfg = config(tmp_path, swarm.port, swarm.comfy_port)
    swarm.post("/StandinTest/ComfyQueue", {"session_id": swarm.session, "seconds": 5, "count": 3})
    status, _ = tick(cfg)
    assert status["reason"] == "3 in the ComfyUI queue"


def test_a_download_being_written_keeps_the_vm_and_is_named(tmp_path, swarm):
    cfg = config(tmp_path, swarm.port)
    partial = tmp_path / "Models" / "Stable-Diffusion" / "flux.download.tmp"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"\0" * 10)
    status, _ = tick(cfg)
    assert status["reason"] == "download of Stable-Diffusion/flux.download.tmp"


def test_a_restarted_swarmui_gets_a_new_session_and_a_dead_one_counts_as_busy_up_to_the_cap(tmp_path):
    swarm, proc = start(tmp_path / "a" / "SwarmUI")
    try:
        cfg = config(tmp_path, swarm.port)
        wait_for(lambda: swarm.post("/API/GetGlobalStatus")["backend_status"]["status"] == "running")
        first, _ = tick(cfg)
        old_server = swarm.post("/API/GetNewSession", {})["server_id"]
        swarm.post("/StandinTest/Restart")  # a new SwarmUI process: every session is gone
        wait_for(lambda: _server_id(swarm) not in (None, old_server))
        restarted, _ = tick(cfg)
        assert restarted["session_id"] not in (None, first["session_id"])  # asked anew, not "invalid session"
        assert not restarted["reason"].startswith(("SwarmUI not answering", "SwarmUI answers with an error"))
    finally:
        stop(proc)
    down, _ = tick(cfg)
    assert down["action"] == "keep" and down["reason"].startswith("SwarmUI not answering")
    assert "counted as busy for 20 min more" in down["reason"] and down["memory"]["troubled_since"]
    assert down["session_id"] is None


def _server_id(swarm) -> str | None:
    try:
        return swarm.post("/API/GetNewSession", {})["server_id"]
    except OSError:
        return None


def test_a_delete_that_cannot_reach_keystone_is_retried_and_says_so(tmp_path, swarm, monkeypatch):
    monkeypatch.setattr(idle_killer, "RETRY_PAUSE", 0)
    cfg = config(tmp_path, swarm.port, idle_seconds=0)
    status, said = tick(cfg)
    assert status["action"] == "delete" and "deleting this server" in status["reason"]
    assert status["acted"].startswith("delete failed, tried again next tick: Keystone at http://127.0.0.1:")
    assert said[0].startswith("<4>delete:")


def test_a_deadline_before_the_next_tick_is_waited_for_not_left_to_the_next_tick(tmp_path, swarm, monkeypatch):
    monkeypatch.setattr(idle_killer, "RETRY_PAUSE", 0)
    cfg = config(tmp_path, swarm.port, idle_seconds=3, tick_seconds=60)
    assert idle_killer.main(["tick", "--config", str(tmp_path / "idle-killer.json")]) == 0
    status = json.loads(Path(cfg.status_file).read_text())
    assert status["action"] == "delete"  # one run: the look that started the clock, then the one at the deadline
    assert status["memory"]["idle_since"] + 3 <= status["tick_at"] < status["memory"]["idle_since"] + 30


def test_fresh_downloads_are_partial_files_written_lately_newest_first(tmp_path):
    models = tmp_path / "Models"
    (models / "Lora").mkdir(parents=True)
    now = time.time()
    for name, age in (("Lora/a.download.tmp", 10), ("Lora/b.safetensors.tmp", 1), ("Lora/old.tmp", 600),
                      ("Lora/done.safetensors", 1), ("Lora/ahead.tmp", -3600)):  # fmt: skip
        path = models / name
        path.write_bytes(b"x")
        os.utime(path, (now - age, now - age))
    assert fresh_downloads((str(models), str(tmp_path / "absent")), now) == (
        "Lora/b.safetensors.tmp",
        "Lora/a.download.tmp",
    )


@pytest.mark.parametrize(
    ("text", "expected"), [("1767225600\n", 1767225600.0), ("12.5", 12.5), ("", None), ("-", None)]
)
def test_read_time_reads_a_unix_time_or_nothing(tmp_path, text, expected):
    path = tmp_path / "t"
    path.write_text(text)
    assert read_time(str(path)) == expected
    assert read_time(str(tmp_path / "absent")) is None


CATALOG = [
    {"type": "identity", "endpoints": [{"interface": "public", "region_id": "ru-7", "url": "https://k/v3"}]},
    {"type": "compute", "endpoints": [
        {"interface": "internal", "region_id": "ru-7", "url": "http://internal/compute/v2.1"},
        {"interface": "public", "region_id": "ru-3", "url": "https://ru-3/compute/v2.1"},
        {"interface": "public", "region_id": "ru-7", "url": "https://ru-7/compute/v2.1/"},
    ]},
]  # fmt: skip


def test_the_compute_endpoint_is_the_interface_and_region_of_the_config():
    assert endpoint(CATALOG, "compute", "public", "ru-7") == "https://ru-7/compute/v2.1"
    assert endpoint(CATALOG, "compute", "internal", None) == "http://internal/compute/v2.1"
    with pytest.raises(Unreachable, match="no public compute endpoint in ru-9"):
        endpoint(CATALOG, "compute", "public", "ru-9")
    with pytest.raises(Unreachable, match=r"compute in several regions \(ru-3, ru-7\): no region set"):
        endpoint(CATALOG, "compute", "public", None)  # a DELETE in the wrong region would answer 404


@pytest.mark.parametrize(
    "damaged",
    ["[]", '{"booted_at": "x", "memory": [1], "credential": "ok", "session_id": 5}',
     '{"memory": {"idle_since": "yesterday"}, "credential": {"checked_at": null}}', "{not json"],
)  # fmt: skip
def test_a_damaged_status_file_never_stops_the_killer(tmp_path, swarm, damaged):
    cfg = config(tmp_path, swarm.port)
    Path(cfg.status_file).parent.mkdir(parents=True)
    Path(cfg.status_file).write_text(damaged)
    status, _ = tick(cfg)
    assert status["action"] == "keep" and status["reason"].startswith("queue empty")


def test_the_config_is_armed_when_written_and_ignores_keys_it_does_not_know(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"server_id": "s", "auth_url": "u", "credential_id": None,
                                "credential_secret": None, "later_key": 1}))  # fmt: skip
    os.utime(path, (1000, 1000))
    cfg = Config.load(path)
    assert cfg.armed_at == 1000 and cfg.idle_seconds == 1800 and SECRET not in repr(cfg)
    assert idle_killer.main(["check", "--config", str(tmp_path / "absent.json")]) == 2
