"""The SwarmUI stand-in speaks SwarmUI's API shapes (shared/research/swarmui-api.md).

It runs here on loopback exactly as the target hosts run it: launch-linux.sh
from a checkout, with Data/Settings.fds and Data/Backends.fds.
"""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[2] / "ground" / "swarmui-standin"
BACKENDS = """0:
    type: comfyui_selfstart
    title: ComfyUI
    enabled: true
    settings:
        StartScript: dlbackend/ComfyUI/main.py
        GPU_ID: 0
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Swarm:
    def __init__(self, root: Path, port: int, comfy_port: int):
        self.root, self.port, self.comfy_port = root, port, comfy_port
        self.session = None

    def post(self, route: str, body: dict | None = None) -> dict:
        if body is None:
            body = {"session_id": self.session}
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{route}", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())


def start(
    root: Path, *, backends: str | None = BACKENDS, comfy: bool = True, extra=()
) -> tuple[Swarm, subprocess.Popen]:
    shutil.copytree(STANDIN, root)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    if comfy:
        subprocess.run(["bash", "launchtools/comfy-install-linux.sh", "nv"], cwd=root, check=True, capture_output=True)
    (root / "Data").mkdir()
    (root / "Data/Settings.fds").write_text("IsInstalled: true\nLaunchMode: none\n")
    if backends is not None:
        (root / "Data/Backends.fds").write_text(backends)
    port, comfy_port = free_port(), free_port()
    proc = subprocess.Popen(
        ["./launch-linux.sh", "--launch_mode", "none", "--host", "127.0.0.1", "--port", str(port), *extra],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "STANDIN_BACKEND_START_SECONDS": "0.5", "STANDIN_COMFY_PORT": str(comfy_port)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    swarm = Swarm(root, port, comfy_port)
    deadline = time.monotonic() + 10
    while True:
        try:
            swarm.session = swarm.post("/API/GetNewSession", {})["session_id"]
            return swarm, proc
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise
            time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    """The launcher and the server it runs (a child, not an exec)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.fixture
def swarm(tmp_path):
    swarm, proc = start(tmp_path / "SwarmUI")
    yield swarm
    stop(proc)


def wait_for(check, timeout=10):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)
    return value


def test_new_session_has_swarmui_fields(swarm):
    reply = swarm.post("/API/GetNewSession", {})
    assert set(reply) == {"session_id", "user_id", "output_append_user", "version", "server_id", "permissions"}
    assert reply["user_id"] == "local"


def test_a_call_without_a_valid_session_gets_invalid_session_id(swarm):
    assert swarm.post("/API/GetGlobalStatus", {"session_id": "nope"})["error_id"] == "invalid_session_id"


def test_global_status_shape_and_backend_loading_then_running(swarm):
    first = swarm.post("/API/GetGlobalStatus")
    assert set(first) == {"status", "backend_status", "supported_features"}
    assert set(first["status"]) == {"waiting_gens", "loading_models", "waiting_backends", "live_gens"}
    assert set(first["backend_status"]) == {"status", "class", "message", "any_loading"}
    assert first["backend_status"]["status"] in ("loading", "running")
    wait_for(lambda: swarm.post("/API/GetGlobalStatus")["backend_status"]["status"] == "running")


def test_queued_generations_count_across_sessions_but_not_in_another_sessions_current_status(swarm):
    wait_for(lambda: swarm.post("/API/GetGlobalStatus")["backend_status"]["status"] == "running")
    other = swarm.post("/API/GetNewSession", {})["session_id"]
    swarm.post("/StandinTest/QueueGeneration", {"session_id": other, "seconds": 1.5, "count": 2})
    status = swarm.post("/API/GetGlobalStatus")["status"]
    assert status["live_gens"] == 1 and status["waiting_gens"] == 1
    assert swarm.post("/API/GetCurrentStatus")["status"]["live_gens"] == 0  # per-session, the research's trap
    wait_for(lambda: swarm.post("/API/GetGlobalStatus")["status"]["live_gens"] == 0, timeout=10)
    assert list((swarm.root / "Output/local/raw").glob("*/*.png"))


def test_list_backends_is_an_object_keyed_by_id(swarm):
    backends = swarm.post("/API/ListBackends", {"session_id": swarm.session, "nonreal": False, "full_data": True})
    assert list(backends) == ["0"]
    assert backends["0"]["type"] == "comfyui_selfstart"
    assert backends["0"]["time_since_used"] == "Never" and backends["0"]["seconds_since_used"] == 0
    assert "current_model" in backends["0"]


def test_model_download_writes_a_download_tmp_then_renames_it(swarm):
    swarm.post("/StandinTest/DownloadModel", {"session_id": swarm.session, "name": "x", "seconds": 1, "bytes": 4096})
    models = swarm.root / "Models/Stable-Diffusion"
    wait_for(lambda: (models / "x.download.tmp").exists(), timeout=5)
    wait_for(lambda: (models / "x.safetensors").exists(), timeout=10)
    assert not (models / "x.download.tmp").exists()


def test_no_backends_is_empty_and_a_missing_comfy_install_is_errored(tmp_path):
    swarm, proc = start(tmp_path / "a", backends=None)
    try:
        assert swarm.post("/API/GetGlobalStatus")["backend_status"]["status"] == "empty"
    finally:
        stop(proc)
    swarm, proc = start(tmp_path / "b", comfy=False)
    try:
        assert swarm.post("/API/GetGlobalStatus")["backend_status"]["status"] == "errored"
    finally:
        stop(proc)


def test_must_rebuild_triggers_a_build_and_exit_42_restarts(tmp_path):
    swarm, proc = start(tmp_path / "s")
    try:
        builds = (swarm.root / "src/bin/build.log").read_text().count("build")
        (swarm.root / "src/bin/must_rebuild").touch()
        old_server = swarm.post("/API/GetNewSession", {})["server_id"]
        swarm.post("/StandinTest/Restart")
        new_server = wait_for(lambda: _server_id(swarm, old_server), timeout=10)
        assert new_server != old_server and proc.poll() is None  # same launcher process, restarted server
        assert (swarm.root / "src/bin/build.log").read_text().count("build") == builds + 1
        assert not (swarm.root / "src/bin/must_rebuild").exists()
    finally:
        stop(proc)


def test_forward_restart_exits_42(tmp_path):
    swarm, proc = start(tmp_path / "f", extra=["--forward_restart"])
    swarm.post("/StandinTest/Restart")
    assert proc.wait(timeout=10) == 42


def _server_id(swarm, old):
    try:
        new = swarm.post("/API/GetNewSession", {})["server_id"]
    except OSError:
        return None
    return new if new != old else None


def test_a_websocket_route_upgrades_and_echoes_text_binary_and_ping(swarm):
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{swarm.port}/StandinTest/EchoWS", open_timeout=5) as ws:
        ws.send("привет")
        assert ws.recv(timeout=5) == "привет"
        ws.send(bytes(range(256)) * 300)  # a 16-bit-length frame is too short for this: 64-bit length
        assert ws.recv(timeout=5) == bytes(range(256)) * 300
        ws.ping().wait(5)
