"""The idle-killer program's looking and recording, on loopback: against the SwarmUI stand-in, and
against a small SwarmUI of this file's own that answers as upstream does where a case needs it.

What it decides is tested rule by rule in test_idle_decision.py; deleting the server through a real
Keystone and Nova, from a real VM, in tests/ground/test_idle_killer.py. Here: that a tick sees what
the VM shows (SwarmUI's global counters and backends, every ComfyUI's own queue at the port it runs
on now, partial downloads, lock and hold files, the data volume), records it without secrets, and
says it in one journal line.

It stays one file past 500 lines: every test runs a tick against the same stand-in SwarmUI and this
file's own, started by the fixtures at its top.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_rent.on_vm import idle_killer
from gpu_rent.on_vm.idle_killer import Config, CredentialRefused, endpoint
from gpu_rent.on_vm.idle_look import (
    comfy_port,
    fresh_downloads,
    live_comfy_ports,
    read_hold,
    read_time,
    unit_pids,
)
from tests.unit.test_swarmui_standin import BACKENDS, comfy_processes, free_port, start, stop, wait_for
from tests.upstream_api import UpstreamAPI

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
        "cgroup_root": str(cgroup_root(tmp_path)),  # swarmui.service's cgroup, empty unless a test fills it
        "data_mount": "",  # no data volume here
        "models_dirs": [str(tmp_path / "Models")],
        "hold_file": str(tmp_path / "hold"),
        "seeding_lock": str(tmp_path / "seeding"),
        "status_file": str(tmp_path / "run" / "idle-killer.json"),
        "last_words_file": str(tmp_path / "lib" / "idle-killer-last-words.json"),
        "memory_file": str(tmp_path / "lib" / "idle-killer-memory.json"),
        "credential_check_seconds": 1e12,  # no credential check in these ticks
        "gpu_percent": None,  # no GPU here; test_idle_look.py gives the killer one
        "shell": False,  # this machine's terminals are not the VM's
    } | kw
    path = tmp_path / "idle-killer.json"
    path.write_text(json.dumps(data))
    return Config.load(path)


def cgroup_root(tmp_path: Path, pids: tuple[int, ...] | None = None) -> Path:
    """A cgroup tree with swarmui.service's processes in it, as systemd keeps it (cgroup v2);
    without pids, as it is (empty at first)."""
    procs = tmp_path / "cgroup" / "system.slice" / "swarmui.service" / "cgroup.procs"
    procs.parent.mkdir(parents=True, exist_ok=True)
    if pids is not None or not procs.exists():
        procs.write_text("".join(f"{pid}\n" for pid in pids or ()))
    return tmp_path / "cgroup"


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


def test_busy_names_the_generations_a_restart_would_cut_and_waits_for_their_end(tmp_path, swarm, monkeypatch):
    """The swarmui role asks before it restarts SwarmUI (money review #18): the killer's own reading of work,
    waited for; a look that sees none says nothing and returns 0, one that still sees some names them."""
    cfg = config(tmp_path, swarm.port)
    said: list[str] = []
    assert idle_killer.busy(cfg, say=said.append) == 0 and said == []
    swarm.post("/StandinTest/QueueGeneration", {"session_id": swarm.session, "seconds": 3, "count": 1})
    assert idle_killer.busy(cfg, say=said.append) == 3 and "gens" in said[-1], said
    monkeypatch.setattr(idle_killer, "BUSY_LOOK_SECONDS", 0.5)
    said.clear()
    assert idle_killer.busy(cfg, wait=30, say=said.append) == 0  # the generation ended within the wait
    assert said and all(line.startswith("waiting: ") for line in said), said
    assert not Path(cfg.status_file).exists()  # it decides nothing and records nothing


def test_busy_waits_for_a_comfyui_that_does_not_tell_its_queue(tmp_path, swarm, monkeypatch):
    """A ComfyUI that runs but does not answer GET /prompt may hold prompts (a tick calls it capped trouble): a
    restart would cut them, so busy names it rather than say nothing runs."""
    mute = socket.create_server(("127.0.0.1", 0))  # accepts, never answers
    monkeypatch.setattr("gpu_rent.on_vm.idle_look.COMFY_TIMEOUT", 0.3)
    try:
        said: list[str] = []
        cfg = config(tmp_path, swarm.port, mute.getsockname()[1])
        assert idle_killer.busy(cfg, say=said.append) == 3
        assert said == [f"ComfyUI on port {mute.getsockname()[1]} does not tell its queue"], said
    finally:
        mute.close()


def test_busy_without_a_swarmui_to_ask_has_nothing_to_wait_for(tmp_path, capsys):
    cfg = config(tmp_path, free_port())  # nothing listens: a first install, SwarmUI down
    path = tmp_path / "idle-killer.json"
    assert idle_killer.main(["busy", "--config", str(path), "--wait", "5"]) == 0 and cfg.swarmui_url
    assert capsys.readouterr().out == ""


def test_a_download_being_written_keeps_the_vm_and_is_named(tmp_path, swarm):
    cfg = config(tmp_path, swarm.port)
    partial = tmp_path / "Models" / "Stable-Diffusion" / "flux.download.tmp"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"\0" * 10)
    status, _ = tick(cfg)
    assert status["reason"] == "download of Stable-Diffusion/flux.download.tmp"


def test_a_first_boots_config_asks_no_swarmui_and_no_comfyui_and_counts_no_trouble(tmp_path, monkeypatch):
    """swarmui_url empty (the config cloud-init writes at a first boot from the image): neither SwarmUI nor the
    processes of its unit are read, and their absence is no trouble; busy has nothing to wait for."""

    def asked(*args, **kwargs):
        raise AssertionError("SwarmUI or its unit was asked")

    monkeypatch.setattr(idle_killer, "swarm_look", asked)
    monkeypatch.setattr(idle_killer, "unit_commands", asked)
    monkeypatch.setattr(idle_killer, "comfy_queues", asked)
    cfg = config(tmp_path, free_port(), swarmui_url="", models_dirs=[], llm=False)
    status, said = tick(cfg)
    assert status["action"] == "keep" and status["reason"] == "SwarmUI not installed yet, idle for 0 min"
    assert status["memory"]["troubled_since"] is None and status["fires_at"] == pytest.approx(status["tick_at"] + 600)
    assert (status["session_id"], status["backends"], status["comfyui"]) == (None, None, [])
    assert said[0].startswith("<6>keep: SwarmUI not installed yet")
    assert idle_killer.busy(cfg) == 0


def test_a_restarted_swarmui_is_read_again_and_a_dead_one_counts_as_busy_up_to_the_cap(tmp_path):
    swarm, proc = start(tmp_path / "a" / "SwarmUI")
    try:
        cfg = config(tmp_path, swarm.port)
        wait_for(lambda: swarm.post("/API/GetGlobalStatus")["backend_status"]["status"] == "running")
        tick(cfg)
        old_server = swarm.post("/API/GetNewSession", {})["server_id"]
        swarm.post("/StandinTest/Restart")  # a new SwarmUI process
        wait_for(lambda: _server_id(swarm) not in (None, old_server))
        restarted, _ = tick(cfg)
        # upstream keeps sessions across a restart (Data/Users.ldb); one it lost is replaced in the tick
        assert restarted["session_id"] is not None
        assert not restarted["reason"].startswith(("SwarmUI not answering", "SwarmUI answers")), restarted["reason"]
    finally:
        stop(proc)
    down, _ = tick(cfg)
    assert down["action"] == "keep" and down["reason"].startswith("SwarmUI not answering")
    assert "counted as busy for 20 min more" in down["reason"] and down["memory"]["troubled_since"]
    assert down["session_id"] == restarted["session_id"]  # kept for when SwarmUI is back


def _server_id(swarm) -> str | None:
    try:
        return swarm.post("/API/GetNewSession", {})["server_id"]
    except OSError:
        return None


def test_a_delete_that_cannot_reach_keystone_is_retried_and_says_so(tmp_path, swarm, monkeypatch):
    monkeypatch.setattr(idle_killer, "RETRY_PAUSE", 0)
    cfg = config(tmp_path, swarm.port, idle_seconds=0)
    seen_words = []
    login = idle_killer.authenticate

    def authenticate(c):
        seen_words.append(json.loads(Path(c.last_words_file).read_text()))
        return login(c)

    monkeypatch.setattr(idle_killer, "authenticate", authenticate)
    status, said = tick(cfg)
    assert status["action"] == "delete" and "deleting this server" in status["reason"]
    assert status["acted"].startswith("delete failed, tried again next tick: Keystone at http://127.0.0.1:")
    assert said[0].startswith("<4>delete:")
    # the last words were kept before the DELETE was tried (the guest may not live to write them after),
    # and dropped when it failed: the server stays, and a later stop must not be blamed on the killer
    assert seen_words[0] == {"server_id": cfg.server_id, "at": status["tick_at"], "reason": status["reason"],
                             "acted": "deleting"}  # fmt: skip
    assert not Path(cfg.last_words_file).exists()


def test_last_words_that_cannot_be_written_never_stop_the_delete(tmp_path, swarm, monkeypatch, capsys):
    monkeypatch.setattr(idle_killer, "RETRY_PAUSE", 0)
    (tmp_path / "lib").write_text("a file where the folder should be")
    cfg = config(tmp_path, swarm.port, idle_seconds=0)
    status, _ = tick(cfg)
    assert status["action"] == "delete" and status["acted"].startswith("delete failed, tried again next tick")
    assert "<4>last words not kept at" in capsys.readouterr().err


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


def test_an_ollama_pull_anyone_started_is_a_fresh_download(tmp_path):
    """server/download.go writes blobs/sha256-<hex>-partial and a -partial-<N> per part; the blob itself
    and a manifest are no download."""
    blobs = tmp_path / "ollama" / "blobs"
    blobs.mkdir(parents=True)
    now, blob = time.time(), "sha256-" + "ab" * 32
    for name, age in ((f"{blob}-partial", 5), (f"{blob}-partial-0", 3), ("sha256-" + "cd" * 32, 1),
                      (f"{blob}-partial-x", 1), ("sha256-abc-partial", 1)):  # fmt: skip
        (blobs / name).write_bytes(b"x")
        os.utime(blobs / name, (now - age, now - age))
    assert fresh_downloads((str(blobs),), now) == (f"{blob}-partial-0", f"{blob}-partial")


@pytest.mark.parametrize(
    ("text", "expected"), [("1767225600\n", 1767225600.0), ("12.5", 12.5), ("", None), ("-", None)]
)
def test_read_time_reads_a_unix_time_or_nothing(tmp_path, text, expected):
    path = tmp_path / "t"
    path.write_text(text)
    assert read_time(str(path)) == expected
    assert read_time(str(tmp_path / "absent")) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1767225600 s1\n", 1767225600.0), ("1767225600 s0\n", None), ("1767225600\n", 1767225600.0), ("s1", None)],
    ids=["this-server", "the-vm-before", "written-before-the-id", "no-time"],
)  # fmt: skip
def test_a_hold_keeps_only_the_server_it_was_made_for(tmp_path, text, expected):
    path = tmp_path / "hold"
    path.write_text(text)
    assert read_hold(str(path), "s1") == expected
    assert read_hold(str(tmp_path / "absent"), "s1") is None


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
    # neither heals by itself: a refusal (named in red by up and status), not a hiccup tried again each tick
    with pytest.raises(CredentialRefused, match="no public compute endpoint in region ru-9"):
        endpoint(CATALOG, "compute", "public", "ru-9")
    with pytest.raises(CredentialRefused, match=r"compute is in several regions \(ru-3, ru-7\) and no region is set"):
        endpoint(CATALOG, "compute", "public", None)  # a DELETE in the wrong region would answer 404


@pytest.mark.parametrize(
    "damaged",
    ["[]", '{"booted_at": "x", "memory": [1], "credential": "ok", "session_id": 5}',
     '{"memory": {"idle_since": "yesterday"}, "credential": {"checked_at": null}}', "{not json",
     '{"memory": {"llm_seen": ["x"]}}', '{"memory": {"llm_seen": {"m": "soon", "n": null}}}'],
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


def test_arm_writes_the_config_root_only_once_and_records_keystones_word(tmp_path, capsys, monkeypatch):
    path = tmp_path / "gpu-rent" / "idle-killer.json"
    config = {"server_id": "s", "auth_url": f"http://127.0.0.1:{free_port()}/v3", "credential_id": "c",
              "credential_secret": SECRET, "status_file": str(tmp_path / "run" / "s.json")}  # fmt: skip
    text = json.dumps(config) + "\n"
    monkeypatch.setattr(idle_killer, "RETRY_PAUSE", 0.0)

    def arm(config_text: str, *look: str) -> tuple[int, dict]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(config_text))
        rc = idle_killer.main(["arm", "--config", str(path), *look])
        out = capsys.readouterr().out
        return rc, json.loads(out) if rc == 0 else out

    lock = tmp_path / "seeding"
    config["seeding_lock"] = str(lock)
    lock.write_text(str(2**31))  # left by a killed run: held far into the future
    text = json.dumps(config) + "\n"
    rc, said = arm(text)
    assert rc == 0 and said["changed"] and not said["credential_ok"] and "look" not in said
    assert said["seeding_lock"] == "cleared" and not lock.exists()
    assert "seeding_lock" not in arm(text)[1]  # none left: nothing said
    assert said["credential"].startswith("credential unreachable") and SECRET not in json.dumps(said)
    assert path.read_text() == text
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    status = json.loads((tmp_path / "run" / "s.json").read_text())
    assert status["credential"]["state"] == "unreachable" and SECRET not in json.dumps(status)
    os.utime(path, (1000, 1000))  # the grace runs from the write: an unchanged config keeps its mtime
    assert arm(text)[1]["changed"] is False and path.stat().st_mtime == 1000
    path.chmod(0o644)
    assert arm(text)[1]["changed"] and path.stat().st_mode & 0o777 == 0o600
    path.parent.chmod(0o755)
    assert arm(text)[1]["changed"] and path.parent.stat().st_mode & 0o777 == 0o700
    # a look at a unit systemctl cannot start is said, not hidden (no systemd here, or no such unit)
    said = arm(text, "--look", "gpu-rent-no-such-unit.service")[1]
    assert said["look"] != "done" and said["changed"] is False


@pytest.mark.parametrize(
    "bad",
    ["{not json", "[]", "", '{"auth_url": "u"}',  # no server_id: the tick could not load it
     '{"server_id": "s", "auth_url": "u", "credential_id": "c", "credential_secret": "x", "billing_hour": "weekly"}'],
)  # fmt: skip
def test_arm_refuses_a_config_the_tick_could_not_load_and_keeps_the_old_one(tmp_path, capsys, monkeypatch, bad):
    path = tmp_path / "idle-killer.json"
    path.write_text('{"old": true}')
    monkeypatch.setattr(sys, "stdin", io.StringIO(bad))
    assert idle_killer.main(["arm", "--config", str(path)]) == 2
    assert "not written" in capsys.readouterr().err and path.read_text() == '{"old": true}'
    # no partial copy left behind (the config's lock stays: empty, as flock wants it)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idle-killer.json", "idle-killer.json.lock"]


def test_arm_replaces_a_config_that_is_not_even_text(tmp_path, capsys, monkeypatch):
    path = tmp_path / "idle-killer.json"
    path.write_bytes(b"\xff\xfe damaged")
    text = json.dumps({"server_id": "s", "auth_url": f"http://127.0.0.1:{free_port()}/v3", "credential_id": None,
                       "credential_secret": None, "status_file": str(tmp_path / "s.json")}) + "\n"  # fmt: skip
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert idle_killer.main(["arm", "--config", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["changed"] and path.read_text() == text


# ---------------------------------------------------------------- SwarmUI as upstream answers (issue 13)
class UpstreamSwarm(UpstreamAPI):
    """SwarmUI's API as upstream 062407c7 answers it (tests/upstream_api.py), for the cases the stand-in
    cannot stage: GetGlobalStatus (AdminAPI.cs) and ListBackends (BackendAPI.cs, keyed by id) as upstream
    shapes them; `refuse` makes a route fail after the session check, as a missing permission does
    (HTTP 400 bad_permissions)."""

    def __init__(self):
        super().__init__()
        self.counters = {"waiting_gens": 0, "loading_models": 0, "waiting_backends": 0, "live_gens": 0}
        self.aggregate = "running"
        self.listing = {"0": backend(0, "running")}
        self.refuse: dict[str, tuple[int, str, str]] = {}  # route -> (HTTP status, error_id, error)

    def route(self, route: str, body: dict) -> tuple[int, dict]:
        if route in self.refuse:
            code, error_id, error = self.refuse[route]
            return code, {"error_id": error_id, "error": error}
        if route == "GetGlobalStatus":
            backend_status = {"status": self.aggregate, "class": "", "message": "", "any_loading": False}
            return 200, {"status": self.counters, "backend_status": backend_status, "supported_features": []}
        if route == "ListBackends":
            return 200, self.listing
        return super().route(route, body)


def backend(n: int, status: str, kind: str = "comfyui_selfstart", **settings) -> dict:
    settings = {"StartScript": "dlbackend/ComfyUI/main.py", "GPU_ID": str(n)} | settings
    return {"type": kind, "status": status, "id": n, "settings": settings, "modcount": 0, "features": [],
            "enabled": True, "title": "", "max_usages": 1, "seconds_since_used": 0, "time_since_used": "Never",
            "can_load_models": True}  # fmt: skip


@pytest.fixture
def upstream():
    swarm = UpstreamSwarm()
    yield swarm
    swarm.close()


COMFY_MAIN = """
# A ComfyUI as the killer sees it: its main.py run with --port, answering GET /prompt as ComfyUI's
# server.py does ({"exec_info": {"queue_remaining": N}}); N is read from the file queue-<port>.
import argparse, json, pathlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, default=8188)
port = parser.parse_known_args()[0].port
class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        queue = pathlib.Path(f"queue-{port}")
        remaining = int(queue.read_text()) if queue.exists() else 0
        data = json.dumps({"exec_info": {"queue_remaining": remaining}}).encode()
        self.send_response(200 if self.path == "/prompt" else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


class Comfies:
    """ComfyUI processes started as SwarmUI starts them (NetworkBackendUtils.DoSelfStart:
    `<venv>/bin/python3 -s main.py <args> --port N <args>` in ComfyUI's folder), in a cgroup of swarmui.service."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.folder = tmp_path / "dlbackend" / "ComfyUI"
        self.folder.mkdir(parents=True)
        (self.folder / "main.py").write_text(COMFY_MAIN)
        self.procs: dict[int, subprocess.Popen] = {}
        self.bystander = subprocess.Popen(["sleep", "600"])  # SwarmUI itself, say: in the unit, no ComfyUI
        self.cgroup = cgroup_root(tmp_path)
        self._write_cgroup()

    def launch(self, queue: int = 0) -> int:
        port = free_port()
        (self.folder / f"queue-{port}").write_text(str(queue))
        argv = [sys.executable, "-s", "main.py", "--extra-model-paths-config", "/x/comfy-auto-model.yaml",
                "--port", str(port), "--preview-method", "latent2rgb"]  # fmt: skip
        self.procs[port] = subprocess.Popen(argv, cwd=self.folder, env={"CUDA_VISIBLE_DEVICES": "0"})
        self._write_cgroup()
        wait_for(lambda: _answers(port))
        return port

    def kill(self, port: int) -> None:
        self.procs.pop(port).kill()
        self._write_cgroup()

    def _write_cgroup(self) -> None:
        cgroup_root(self.tmp_path, (self.bystander.pid, *(p.pid for p in self.procs.values())))

    def close(self) -> None:
        for proc in [*self.procs.values(), self.bystander]:
            proc.kill()
            proc.wait()


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), idle_killer.urllib.request.urlopen(f"http://127.0.0.1:{port}/prompt", timeout=1):
        return True
    return False


@pytest.fixture
def comfies(tmp_path):
    comfy = Comfies(tmp_path)
    yield comfy
    comfy.close()


def test_a_killer_facing_401_takes_a_new_session_within_the_tick_and_keeps_it_after(tmp_path, upstream):
    cfg = config(tmp_path, upstream.port)
    Path(cfg.status_file).parent.mkdir(parents=True)
    Path(cfg.status_file).write_text(json.dumps({"session_id": "one-swarmui-forgot"}))  # e.g. Data/ lost
    status, said = tick(cfg)
    assert status["reason"] == "queue empty, 1 of 1 ComfyUI backend running, idle for 0 min", status["reason"]
    assert status["session_id"] in upstream.sessions and said[0].startswith("<6>keep: queue empty")
    assert upstream.asked == [("GetGlobalStatus", 401), ("GetNewSession", 200), ("GetGlobalStatus", 200),
                              ("ListBackends", 200)]  # fmt: skip
    upstream.asked.clear()
    again, _ = tick(cfg)
    assert again["session_id"] == status["session_id"] and ("GetNewSession", 200) not in upstream.asked


@pytest.mark.parametrize(
    ("route", "error_id", "error"),
    [("GetGlobalStatus", "bad_permissions", "You lack permissions for this route."),
     ("GetGlobalStatus", "bad_route", "Unknown API route"),
     ("GetNewSession", "basic_api", "Wrong content type")],
)  # fmt: skip
def test_a_400_is_named_by_its_error_id_in_the_reason_the_status_file_and_the_journal(
    tmp_path, upstream, route, error_id, error
):
    upstream.refuse[route] = (400, error_id, error)
    if route == "GetNewSession":
        upstream.answer = lambda r, b, answer=upstream.answer: (400, {"error_id": error_id, "error": error})
    status, said = tick(config(tmp_path, upstream.port))
    named = f"SwarmUI answers {route} with {error_id} ({error}): counted as busy for 20 min more"
    assert status["reason"] == named and named in said[0] and "not answering" not in said[0]
    assert json.loads(Path(config(tmp_path, upstream.port).status_file).read_text())["reason"] == named


def test_swarmui_down_keeps_the_session_for_when_it_is_back(tmp_path, upstream):
    cfg = config(tmp_path, upstream.port)
    first, _ = tick(cfg)
    upstream.close()
    down, _ = tick(cfg)
    assert down["reason"].startswith("SwarmUI not answering") and down["session_id"] == first["session_id"]


def test_a_running_generation_with_a_second_errored_backend_keeps_the_vm(tmp_path, upstream):
    # BackendHandler.CurrentBackendStatus says errored as soon as ANY backend errored
    upstream.aggregate = "errored"
    upstream.listing["1"] = backend(1, "errored", kind="comfyui_api", Address="http://10.9.9.9:8188")
    cfg = config(tmp_path, upstream.port, idle_seconds=0, cap_seconds=0)  # no cap, no idle time: only work keeps
    upstream.counters["live_gens"] = 1
    status, said = tick(cfg)
    assert status["action"] == "keep" and status["reason"] == "1 live gens", status["reason"]
    assert status["backends"] == "1 of 1 ComfyUI backend running" and said[0] == "<6>keep: 1 live gens"
    upstream.counters["live_gens"] = 0  # done: the user's errored backend is no trouble, the queue is empty
    status, _ = tick(cfg)
    assert status["action"] == "delete" and status["reason"].startswith("queue empty, 1 of 1 ComfyUI backend running")


def test_none_of_our_backends_running_is_trouble_whatever_else_runs(tmp_path, upstream):
    upstream.listing = {"0": backend(0, "errored"), "1": backend(1, "loading"), "2": backend(2, "running", kind="x")}
    status, _ = tick(config(tmp_path, upstream.port))
    assert status["reason"] == "0 of 2 ComfyUI backends running (1 errored, 1 loading): counted as busy for 20 min more"


def test_a_comfyui_restarted_three_times_still_has_its_queue_seen(tmp_path, upstream, comfies):
    cfg = config(tmp_path, upstream.port)
    port = comfies.launch(queue=2)
    for restart in range(4):
        status, _ = tick(cfg)
        assert status["reason"] == "2 in the ComfyUI queue" and status["comfyui"] == [{"port": port, "queue": 2}]
        if restart < 3:  # AutoRestart relaunches it on the next port (NetworkBackendUtils.GetNextPort)
            comfies.kill(port)
            port = comfies.launch(queue=2)


def test_a_comfyui_that_runs_but_does_not_tell_its_queue_is_trouble_never_an_empty_queue(tmp_path, upstream, comfies):
    port = comfies.launch(queue=0)
    (comfies.folder / f"queue-{port}").write_text("garbage")  # its GET /prompt now fails, as a hung one would
    status, _ = tick(config(tmp_path, upstream.port))
    assert status["comfyui"] == [{"port": port, "queue": None}]
    assert status["reason"].startswith(f"ComfyUI on port {port} does not tell its queue: counted as busy for ")
    assert status["fires_at"] is None


def test_every_comfyui_is_counted_one_per_gpu(tmp_path, upstream, comfies):
    upstream.listing = {"0": backend(0, "running"), "1": backend(1, "running")}
    ports = [comfies.launch(queue=1), comfies.launch(queue=2)]
    status, _ = tick(config(tmp_path, upstream.port))
    assert status["reason"] == "3 in the ComfyUI queue" and status["backends"] == "2 of 2 ComfyUI backends running"
    seen = [{"port": ports[0], "queue": 1}, {"port": ports[1], "queue": 2}]
    assert status["comfyui"] == sorted(seen, key=lambda c: c["port"])
    for port in ports:
        (comfies.folder / f"queue-{port}").write_text("0")
    idle, _ = tick(config(tmp_path, upstream.port))
    assert idle["reason"].startswith("queue empty, 2 of 2 ComfyUI backends running, idle for")


def test_a_comfyui_outside_swarmuis_unit_is_not_ours_and_an_explicit_port_list_overrides(tmp_path, comfies):
    port = comfies.launch(queue=1)
    assert live_comfy_ports(str(comfies.cgroup), "swarmui.service") == (port,)
    assert live_comfy_ports(str(comfies.cgroup), "other.service", proc=str(tmp_path / "noproc")) == ()
    cgroup_root(tmp_path, (comfies.bystander.pid,))  # the ComfyUI left the unit: not SwarmUI's
    assert live_comfy_ports(str(comfies.cgroup), "swarmui.service") == ()


def test_without_the_unit_in_the_cgroup_tree_the_processes_are_found_by_their_cgroup_line(tmp_path):
    proc = tmp_path / "proc"
    for pid, cgroup, argv in [
        (11, "0::/system.slice/swarmui.service\n", ["python3", "-s", "main.py", "--port", "7823"]),
        (12, "0::/system.slice/swarmui.service\n", ["/root/.dotnet/dotnet", "SwarmUI.dll"]),
        (13, "0::/system.slice/other.service\n", ["python3", "main.py", "--port", "7900"]),
        (14, "12:pids:/system.slice/swarmui.service\n1:name=systemd:/system.slice/swarmui.service\n",
         ["python3", "/opt/swarmui/dlbackend/ComfyUI/main.py", "--port=9100"]),  # cgroup v1
    ]:  # fmt: skip
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(cgroup)
        (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (proc / "self").mkdir()
    assert sorted(unit_pids(str(tmp_path / "no-cgroup"), "swarmui.service", str(proc))) == [11, 12, 14]
    assert live_comfy_ports(str(tmp_path / "no-cgroup"), "swarmui.service", str(proc)) == (7823, 9100)


@pytest.mark.parametrize(
    ("argv", "port"),
    [(["/d/venv/bin/python3", "-s", "main.py", "--port", "7821"], 7821),
     (["python3", "-s", "main.py", "--listen", "--port", "7821", "--port", "7830"], 7830),  # argparse: the last
     (["python3", "main.py", "--port=8000"], 8000),
     (["python3", "main.py"], None),  # ComfyUI's own 8188 then, never SwarmUI's
     (["python3", "other.py", "--port", "7821"], None),
     (["python3", "main.py", "--port", "x"], None),
     (["python3", "main.py", "--port"], None)],
)  # fmt: skip
def test_comfyuis_port_is_read_from_its_command_line(argv, port):
    assert comfy_port(argv) == port


def test_the_data_volume_not_mounted_or_without_its_marker_is_named_as_trouble(tmp_path, upstream, monkeypatch):
    data = tmp_path / "swarm_data"
    data.mkdir()
    cfg = config(tmp_path, upstream.port, data_mount=str(data))
    status, said = tick(cfg)
    assert status["reason"] == f"data volume not mounted at {data}: counted as busy for 20 min more"
    assert "SwarmUI" not in said[0]
    monkeypatch.setattr(idle_killer.os.path, "ismount", lambda p: p == str(data))
    assert tick(cfg)[0]["reason"].startswith(f"data volume at {data} lacks its marker .gpu-rent-ready: counted")
    (data / ".gpu-rent-ready").touch()
    assert tick(cfg)[0]["reason"].startswith("queue empty")


# ---------------------------------------------------------------- the stand-in's ComfyUI processes (issue 13)
def unit_of(tmp_path: Path, launcher: subprocess.Popen) -> None:
    """swarmui.service's cgroup as systemd would fill it: the launcher and every process under it
    (bash, the server, its ComfyUI children), written where the killer's config looks."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if entry.name.isdigit():
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    pids, todo = [], [launcher.pid]
    while todo:
        pids.append(pid := todo.pop())
        todo += children.get(pid, [])
    cgroup_root(tmp_path, tuple(pids))


def comfy_up(swarm, port: int) -> bool:
    """The ComfyUI on port answers with an empty queue, and SwarmUI calls all its backends running."""
    with (
        contextlib.suppress(OSError, ValueError),
        idle_killer.urllib.request.urlopen(f"http://127.0.0.1:{port}/prompt", timeout=1) as reply,
    ):
        empty = json.loads(reply.read())["exec_info"]["queue_remaining"] == 0
        return empty and all(b["status"] == "running" for b in swarm.post("/API/ListBackends").values())
    return False


def standin_queue(port: int, count: int, seconds: float) -> None:
    """The ComfyUI stand-in's hook: prompts as the Comfy Workflow tab sends them, unseen by SwarmUI."""
    body = json.dumps({"count": count, "seconds": seconds}).encode()
    with idle_killer.urllib.request.urlopen(f"http://127.0.0.1:{port}/standin_test/queue", body, timeout=5):
        pass


TWO_GPUS = BACKENDS + BACKENDS.replace("0:", "1:").replace("GPU_ID: 0", "GPU_ID: 1")


def test_the_standins_comfyui_queue_is_seen_at_the_port_it_runs_on(tmp_path):
    swarm, proc = start(tmp_path / "SwarmUI")
    try:
        cfg = config(tmp_path, swarm.port)
        wait_for(lambda: comfy_up(swarm, swarm.comfy_port))
        unit_of(tmp_path, proc)
        swarm.post("/StandinTest/ComfyQueue", {"session_id": swarm.session, "seconds": 5, "count": 3})
        status, _ = tick(cfg)
        assert status["reason"] == "3 in the ComfyUI queue" and status["comfyui"] == [{"port": swarm.comfy_port,
                                                                                       "queue": 3}]  # fmt: skip
    finally:
        stop(proc)


def test_a_session_the_standin_does_not_know_is_replaced_within_the_tick(tmp_path):
    swarm, proc = start(tmp_path / "SwarmUI")
    try:
        cfg = config(tmp_path, swarm.port)
        wait_for(lambda: swarm.post("/API/GetGlobalStatus")["backend_status"]["status"] == "running")
        Path(cfg.status_file).parent.mkdir(parents=True)
        Path(cfg.status_file).write_text(json.dumps({"session_id": "not-a-session-of-this-swarmui"}))
        status, _ = tick(cfg)
        assert status["reason"].startswith("queue empty, 1 of 1 ComfyUI backend running, idle for"), status["reason"]
        assert status["session_id"] != "not-a-session-of-this-swarmui"
    finally:
        stop(proc)


def test_a_generation_beside_an_errored_remote_backend_keeps_the_vm_on_the_standin(tmp_path):
    dead = free_port()  # a user's remote ComfyUI, offline
    remote = "1:\n    type: comfyui_api\n    title: Remote\n    enabled: true\n    settings:\n"
    remote += f"        Address: http://127.0.0.1:{dead}\n"
    swarm, proc = start(tmp_path / "SwarmUI", backends=BACKENDS + remote)
    try:
        cfg = config(tmp_path, swarm.port, cap_seconds=0, idle_seconds=0)  # only work may keep it
        wait_for(lambda: [b["status"] for b in swarm.post("/API/ListBackends").values()] == ["running", "errored"], 40)
        assert swarm.post("/API/GetGlobalStatus")["backend_status"]["status"] == "errored"
        swarm.post("/StandinTest/QueueGeneration", {"session_id": swarm.session, "seconds": 5, "count": 2})
        status, _ = tick(cfg)
        assert status["action"] == "keep" and "gens" in status["reason"], status["reason"]
        assert "counted as busy" not in status["reason"] and status["backends"] == "1 of 1 ComfyUI backend running"
    finally:
        stop(proc)


def test_the_standins_comfyui_killed_three_times_is_seen_at_each_new_port(tmp_path):
    swarm, proc = start(tmp_path / "SwarmUI")
    try:
        cfg = config(tmp_path, swarm.port)
        port = swarm.comfy_port
        for restart in range(4):
            seen = lambda: f"ComfyUI processes: {comfy_processes(swarm.root)}"  # noqa: E731
            wait_for(lambda p=port: comfy_up(swarm, p), 60, seen)
            unit_of(tmp_path, proc)
            standin_queue(port, 2, 5)
            status, _ = tick(cfg)
            assert status["reason"] == "2 in the ComfyUI queue" and status["comfyui"] == [{"port": port, "queue": 2}]
            if restart < 3:  # AutoRestart on a later port (NetworkBackendUtils.GetNextPort)
                old = comfy_processes(swarm.root)[0]["pid"]
                os.kill(old, 9)
                # GetNextPort skips a port something listens on: another process on this machine may
                # hold port+1, so the new port is read from the relaunched process, never assumed
                relaunched = wait_for(lambda o=old: [c for c in comfy_processes(swarm.root) if c["pid"] != o], 60, seen)
                assert relaunched[0]["port"] > port
                port = relaunched[0]["port"]
    finally:
        stop(proc)


def test_one_comfyui_per_gpu_all_counted_on_the_standin(tmp_path):
    swarm, proc = start(tmp_path / "SwarmUI", backends=TWO_GPUS)
    try:
        cfg = config(tmp_path, swarm.port)
        ports = (swarm.comfy_port, swarm.comfy_port + 1)
        wait_for(lambda: all(comfy_up(swarm, p) for p in ports), 30)
        unit_of(tmp_path, proc)
        standin_queue(ports[0], 1, 5)
        standin_queue(ports[1], 2, 5)
        status, _ = tick(cfg)
        assert status["reason"] == "3 in the ComfyUI queue" and status["backends"] == "2 of 2 ComfyUI backends running"
        assert status["comfyui"] == [{"port": ports[0], "queue": 1}, {"port": ports[1], "queue": 2}]
    finally:
        stop(proc)
