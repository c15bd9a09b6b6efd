"""The llama.cpp stand-in answers as upstream llama-server b10621 does.

Each test starts the real `ground/llamacpp-standin/llama-server` (its shebang finds the system python3) on a free
loopback port with a GGUF written by gguf.py, as the VM runs the one out of the release archive. Each names the
upstream behaviour it pins; the stand-in's README lists each with its upstream file.
"""

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest

from gpu_rent.on_vm import idle_look
from tests.module_file import load
from tests.unit.test_ollama_standin import api, call, free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "ground" / "llamacpp-standin"
SERVER = STANDIN / "llama-server"


gguf = load("llamacpp_standin_gguf", STANDIN / "gguf.py")
release = load("llamacpp_standin_release", STANDIN / "release.py")

ENV = {"PATH": "/usr/bin:/bin", "STANDIN_LLAMA_LOAD_SECONDS": "0.4", "STANDIN_LLAMA_TOKENS_PER_SECOND": "20"}


class Llama:
    def __init__(
        self, tmp: Path, *args: str, model: Path | None = None, port: int | None = None, env: dict | None = None
    ):
        self.port, self.out = port or free_port(), tmp / f"llama-{time.monotonic_ns()}.err"
        if model is None:
            model = tmp / "tiny.gguf"
            if not model.exists():
                gguf.write_model(model, 64 * 1024)
        self.model = model
        argv = [str(SERVER), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port), *args]
        with self.out.open("wb") as sink:
            self.proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=ENV | (env or {}),
                                         start_new_session=True)  # fmt: skip

    def up(self) -> bool:
        assert self.proc.poll() is None, self.out.read_text()
        with contextlib.suppress(OSError):
            return call(self.port, "GET", "/health")[0] == 200
        return False

    def wait_up(self) -> "Llama":
        wait_for(self.up, what="llama-server up")
        return self

    def log(self) -> str:
        return self.out.read_text()


@pytest.fixture
def start(tmp_path):
    started = []

    def run(*args, **kwargs) -> Llama:
        started.append(Llama(tmp_path, *args, **kwargs))
        return started[-1]

    yield run
    for server in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait()


def in_background(fn):
    result = {}
    thread = threading.Thread(target=lambda: result.update(value=fn()), daemon=True)
    thread.start()
    return thread, result


def test_version_and_an_unknown_flag_as_common_arg_cpp():
    """arg.cpp --version: llama_print_build_info on stderr, exit 0; an unknown flag: 'error: invalid argument', 1."""
    out = subprocess.run([str(SERVER), "--version"], env=ENV, capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (0, "")
    assert out.stderr == ("version: 0.3.0-dev (build 10621, commit c1d0e7a00)\n"
                          "built with GNU 11.4.0 for Linux x86_64\n")  # fmt: skip
    assert release.TAG == "b10621"
    out = subprocess.run([str(SERVER), "--no-such-flag"], env=ENV, capture_output=True, text=True)
    assert (out.returncode, out.stderr) == (1, "error: invalid argument: --no-such-flag\n")
    out = subprocess.run([str(SERVER), "--n_gpu_layers", "all", "--version"], env=ENV, capture_output=True)
    assert out.returncode == 0  # "--" spellings take '_' for '-'


@pytest.mark.parametrize(
    ("devices", "said"),
    [
        (None, "Available devices:\n  Vulkan0: NVIDIA L4 (23034 MiB, 22000 MiB free)\n"),  # the default: a GPU
        ("", "Available devices:\n  (none)\n"),  # none: a Vulkan build without NVIDIA's Vulkan ICD, a CPU build
        ("Vulkan0:NVIDIA L4:23034:22000;Vulkan1:NVIDIA A100-SXM4-80GB:81920:81000",
         "Available devices:\n  Vulkan0: NVIDIA L4 (23034 MiB, 22000 MiB free)\n"
         "  Vulkan1: NVIDIA A100-SXM4-80GB (81920 MiB, 81000 MiB free)\n"),
    ],
)  # fmt: skip
def test_list_devices_prints_each_device_but_the_cpu_and_exits_0_as_common_arg_cpp(devices, said):
    """arg.cpp --list-devices: "Available devices:", then `  NAME: DESCRIPTION (TOTAL MiB, FREE MiB free)` on stdout
    for each non-CPU device, exit 0, before any model is looked for; none listed is the header alone."""
    env = ENV if devices is None else ENV | {"STANDIN_LLAMA_DEVICES": devices}
    out = subprocess.run([str(SERVER), "--list-devices"], env=env, capture_output=True, text=True)
    assert (out.returncode, out.stdout, out.stderr) == (0, said, "")


def test_loading_then_ready_models_props_and_slots(start):
    """server-http.cpp middleware_server_state: 503 'Loading model' first; then the handlers of server-context.cpp."""
    llama = start("-a", "tiny-alias", "-ngl", "all", "-c", "1024", "-np", "2", "--no-webui")
    code, body = wait_for(lambda: _try(lambda: api(llama.port, "GET", "/health")), what="listening")
    assert (code, body) == (503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
    assert api(llama.port, "GET", "/v1/models")[0] == 503
    llama.wait_up()
    assert api(llama.port, "GET", "/v1/health") == (200, {"status": "ok"})
    for path in ("/v1/models", "/models"):
        code, body = api(llama.port, "GET", path)
        assert code == 200 and body["object"] == "list" and body["data"][0]["id"] == "tiny-alias"
        assert body["data"][0]["owned_by"] == "llamacpp" and body["models"][0]["name"] == "tiny-alias"
    code, props = api(llama.port, "GET", "/props")
    assert code == 200 and props["total_slots"] == 2 and props["is_sleeping"] is False
    assert (props["model_alias"], props["model_path"], props["build_info"]) == ("tiny-alias", str(llama.model),
                                                                                "b10621-c1d0e7a00")  # fmt: skip
    code, slots = api(llama.port, "GET", "/slots")  # --slots is upstream's default
    assert code == 200 and [(s["id"], s["n_ctx"], s["is_processing"]) for s in slots] == [(0, 512, False),
                                                                                          (1, 512, False)]  # fmt: skip
    assert "loading model" in llama.log()
    assert api(llama.port, "GET", "/nope")[0] == 404


def _try(fn):
    with contextlib.suppress(OSError):
        return fn()
    return None


def test_model_id_without_alias_is_the_file_name(start, tmp_path):
    """server-context.cpp: 'fallback: derive model name from file name'."""
    llama = start().wait_up()
    assert api(llama.port, "GET", "/v1/models")[1]["data"][0]["id"] == "tiny.gguf"


def test_completion_holds_a_slot_and_counts_in_metrics(start):
    """A generating slot is_processing; requests_processing counts it; with -np 1 a second request is deferred."""
    llama = start("-np", "1", "--metrics").wait_up()
    first, result = in_background(lambda: api(llama.port, "POST", "/completion", {"prompt": "hi", "n_predict": 16}))
    wait_for(lambda: api(llama.port, "GET", "/slots")[1][0]["is_processing"], what="slot busy")
    second, result2 = in_background(
        lambda: api(
            llama.port,
            "POST",
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
        )
    )
    metrics = wait_for(lambda: (m := call(llama.port, "GET", "/metrics")[2].decode()) and
                       "llamacpp:requests_deferred 1" in m and m, what="deferred")  # fmt: skip
    assert "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n" in metrics
    assert "# HELP llamacpp:requests_deferred Number of requests deferred\n" in metrics  # server-task.cpp to_metrics
    first.join(10)
    second.join(10)
    code, body = result["value"]
    assert code == 200 and body["stop"] is True and body["tokens_predicted"] == 16 and body["stop_type"] == "limit"
    code, body = result2["value"]
    assert code == 200 and body["object"] == "chat.completion" and body["choices"][0]["finish_reason"] == "length"
    assert api(llama.port, "GET", "/slots")[1][0]["is_processing"] is False
    assert "llamacpp:requests_processing 0" in call(llama.port, "GET", "/metrics")[2].decode()


def test_streams_are_server_sent_events(start):
    """handle_completions_impl: `data: ...` lines; `data: [DONE]` ends the OAI shapes, not the native one."""
    llama = start().wait_up()
    code, headers, data = call(
        llama.port,
        "POST",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "stream": True},
    )
    lines = [line for line in data.decode().split("\n\n") if line]
    assert code == 200 and headers["Content-Type"] == "text/event-stream"
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "The stand-in writes"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    data = call(llama.port, "POST", "/completion", {"prompt": "x", "n_predict": 2, "stream": True})[2].decode()
    assert "[DONE]" not in data and json.loads(data.strip().split("\n\n")[-1][6:])["stop"] is True


def test_disabled_endpoints_answer_501(start):
    """--no-slots and no --metrics: 501 not_supported_error with upstream's messages."""
    llama = start("--no-slots").wait_up()
    assert api(llama.port, "GET", "/slots") == (501, {"error": {
        "code": 501, "message": "This server does not support slots endpoint. Start it with `--slots`",
        "type": "not_supported_error"}})  # fmt: skip
    assert api(llama.port, "GET", "/metrics") == (501, {"error": {
        "code": 501, "message": "This server does not support metrics endpoint. Start it with `--metrics`",
        "type": "not_supported_error"}})  # fmt: skip


def test_a_bad_model_and_a_taken_port_exit_1(start, tmp_path):
    """gguf.cpp's magic check and server.cpp's exits; server-http.cpp binds before loading."""
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"PK\x03\x04" + bytes(64))
    llama = start(model=bad)
    assert llama.proc.wait(10) == 1
    assert "invalid magic characters: 'PK??', expected 'GGUF'" in llama.log()
    assert "exiting due to model loading error" in llama.log()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        llama = start(port=taken.getsockname()[1])
        assert llama.proc.wait(10) == 1
    assert f"couldn't bind HTTP server socket, hostname: 127.0.0.1, port: {llama.port}" in llama.log()


def test_sleep_after_idle_and_wake_by_a_completion(start):
    """server-queue.cpp start_loop / server-context.cpp: asleep, /health /props /v1/models /metrics answer without
    waking (cached), a completion wakes it; /slots would wake it too."""
    llama = start("--sleep-idle-seconds", "1", "--metrics").wait_up()
    wait_for(lambda: api(llama.port, "GET", "/props")[1]["is_sleeping"], timeout=5, what="asleep")
    assert "entering sleeping state" in llama.log()
    assert api(llama.port, "GET", "/health") == (200, {"status": "ok"})
    assert api(llama.port, "GET", "/v1/models")[0] == 200
    assert call(llama.port, "GET", "/metrics")[0] == 200
    assert api(llama.port, "GET", "/props")[1]["is_sleeping"] is True  # none of those woke it
    code, body = api(llama.port, "POST", "/completion", {"prompt": "wake", "n_predict": 2})
    assert code == 200 and body["tokens_predicted"] == 2
    assert api(llama.port, "GET", "/props")[1]["is_sleeping"] is False
    assert "exiting sleeping state" in llama.log()


def _asleep_after(port: int, t0: float) -> float:
    """Seconds from t0 until /props (which leaves the countdown alone) says is_sleeping."""
    while not api(port, "GET", "/props")[1]["is_sleeping"]:
        assert time.monotonic() - t0 < 10, "not asleep in 10 s"
        time.sleep(0.02)
    return time.monotonic() - t0


def test_sleep_comes_n_seconds_after_the_last_task_and_metrics_leaves_the_timer(start):
    """server-queue.cpp start_loop waits for a task or 1 s, then sleeps once ggml_time_ms says N s have passed
    since the last task: N s after it (b11434: 3.01 s for N = 3), not on a 1 s tick of its own. A METRICS task
    wakes that loop but does not reset the idle timer (task_resets_idle_timer, b10622 and b11434)."""
    llama = start("--sleep-idle-seconds", "2", "--metrics").wait_up()
    code, _, _ = call(llama.port, "GET", "/slots")
    t0 = time.monotonic()
    assert code == 200 and 1.9 <= _asleep_after(llama.port, t0) < 2.5
    code, _, _ = call(llama.port, "GET", "/slots")  # wakes it; the countdown starts again
    t0 = time.monotonic()
    time.sleep(1.2)
    assert call(llama.port, "GET", "/metrics")[0] == 200
    assert 2.1 <= _asleep_after(llama.port, t0) < 2.9  # 1.2 + 1 s tick, not 1.2 + 2 s


def test_a_reload_after_sleep_holds_every_route_but_health_and_the_killer_names_it(start):
    """server-queue.cpp start_loop reloads the model holding mutex_tasks, which is_sleeping() takes: while a
    completion wakes it, /props, /v1/models and /slots do not answer until the model is up, /health does
    (measured on the real b11434, issue 38). The killer's look times out on /props, finds /health answering,
    and names a reload, not a fault."""
    llama = start("--sleep-idle-seconds", "1", env={"STANDIN_LLAMA_LOAD_SECONDS": "3"}).wait_up()
    wait_for(lambda: api(llama.port, "GET", "/props")[1]["is_sleeping"], timeout=8, what="asleep")
    waking, answer = in_background(lambda: api(llama.port, "POST", "/completion", {"prompt": "wake", "n_predict": 1}))
    wait_for(lambda: "exiting sleeping state" in llama.log(), what="the reload begun")
    for path in ("/props", "/v1/models", "/slots"):
        with pytest.raises(TimeoutError):
            call(llama.port, "GET", path, timeout=0.5)
    assert api(llama.port, "GET", "/health") == (200, {"status": "ok"})
    look = idle_look.llm_look("llamacpp", f"http://127.0.0.1:{llama.port}", timeout=0.5)
    assert look.silent and look.loading and look.error == "GET /props waits for the model's reload", look
    waking.join(10)
    assert answer["value"][0] == 200 and api(llama.port, "GET", "/props")[1]["is_sleeping"] is False


def test_sigterm_exits_0_and_a_restart_binds_the_port_at_once(start):
    """httplib's default_socket_options set SO_REUSEPORT: the next life binds over the last one's TIME_WAIT
    connections (a unit's restart), where a plain bind would fail for a minute."""
    llama = start().wait_up()
    with socket.create_connection(("127.0.0.1", llama.port)) as held:  # a client's connection, kept open
        held.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert held.recv(4096).startswith(b"HTTP/1.1 200")
        llama.proc.send_signal(signal.SIGTERM)
        assert llama.proc.wait(5) == 0  # its end of the connection closed first: the port lingers in FIN_WAIT
        assert start(port=llama.port).wait_up().up()


def test_gguf_and_release_archive(tmp_path):
    """gguf.md v3 header; release.yml's archive layout; sha256sum.txt matches the archive."""
    digest = gguf.write_model(tmp_path / "m.gguf", 4096, name="tiny")
    data = (tmp_path / "m.gguf").read_bytes()
    assert len(data) == 4096 and data[:8] == b"GGUF\x03\x00\x00\x00" and b"general.name" in data
    assert digest == hashlib.sha256(data).hexdigest()
    archive = release.build_release(tmp_path / "rel")
    assert archive.name == "llama-b10621-bin-ubuntu-vulkan-x64.tar.gz"
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["llama-b10621", "llama-b10621/LICENSE", "llama-b10621/llama-server"]
        server = members["llama-b10621/llama-server"]
        assert (server.mode, server.uid, server.gid) == (0o755, 0, 0)
        assert tar.extractfile(server).read() == SERVER.read_bytes()
    line = (tmp_path / "rel" / "sha256sum.txt").read_text()
    assert line == f"{hashlib.sha256(archive.read_bytes()).hexdigest()}  {archive.name}\n"
    assert release.build_release(tmp_path / "again").read_bytes() == archive.read_bytes()
