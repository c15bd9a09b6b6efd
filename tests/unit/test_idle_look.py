"""What the idle-killer reads besides SwarmUI (issue 14): each GPU's utilisation from nvidia-smi, the
newest key typed in a terminal, the user's KEEP_ALIVE_COMMAND, and the installs SwarmUI's service runs
(pip, git, its pickle converter) - on real processes and a real
pseudo-terminal of this machine, and through a whole tick.

No machine here has a GPU: nvidia-smi is a test-only script printing what the real one prints for the
same query (`--query-gpu=index,utilization.gpu,memory.used --format=csv,noheader,nounits`: one GPU
per line, "[N/A]" where a GPU does not tell), with the real one's words and exit codes where it has
no device (6, "No devices were found") and no driver (9).

It stays one file past 500 lines: every test feeds the same tick helpers at its top (the fake
nvidia-smi, the pseudo-terminal, the keep-alive command), and split, each file would carry them.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpu_rent.on_vm import idle_killer, idle_look
from gpu_rent.on_vm.idle_decision import LlmLook
from gpu_rent.on_vm.idle_look import go_time, last_terminal_input, llm_look, parse_gpus, read_gpus, run_keep_alive
from tests.unit.test_idle_killer_program import cgroup_root, config, tick
from tests.unit.test_idle_killer_program import swarm as swarm  # a fixture
from tests.unit.test_swarmui_standin import free_port

NO_DEVICES = "No devices were found\n"  # nvidia-smi exit 6, on stdout
NO_DRIVER = (  # nvidia-smi exit 9, on stdout
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
    "NVIDIA driver is installed and running.\n\n"
)
NO_PERMISSION = "Failed to initialize NVML: Insufficient Permissions\n"  # exit 4: /dev/nvidia* not readable
TWO_GPUS = "0, 87, 20321\n1, 0, 3\n"
MIG = "0, [N/A], 4500\n"


def nvidia_smi_script(out: str, code: int = 0) -> str:
    """An nvidia-smi that prints out for GPU_QUERY and exits with code; other arguments fail loudly."""
    return (
        "#!/bin/sh\n"
        '[ "$1" = --query-gpu=index,utilization.gpu,memory.used ] && [ "$2" = --format=csv,noheader,nounits ]'
        ' || { echo "unexpected arguments: $*" >&2; exit 2; }\n'
        f"cat <<'OUT'\n{out}OUT\nexit {code}\n"
    )


def fake_nvidia_smi(tmp_path: Path, out: str, code: int = 0) -> str:
    path = tmp_path / "bin" / "nvidia-smi"
    path.parent.mkdir(exist_ok=True)
    path.write_text(nvidia_smi_script(out, code))
    path.chmod(0o755)
    return str(path)


def test_parse_gpus_reads_every_gpu_and_na_as_unknown():
    assert parse_gpus(TWO_GPUS) == ((0, 87.0, 20321.0), (1, 0.0, 3.0))
    assert parse_gpus(MIG) == ((0, None, 4500.0),)
    assert parse_gpus("") == ()


@pytest.mark.parametrize("text", [NO_DEVICES, NO_DRIVER, NO_PERMISSION, "0, 87\n"])
def test_parse_gpus_refuses_what_is_not_a_gpu_list(text):
    with pytest.raises(ValueError):
        parse_gpus(text)


@pytest.mark.parametrize(
    ("out", "code", "expected"),
    [
        (TWO_GPUS, 0, (((0, 87.0, 20321.0), (1, 0.0, 3.0)), None)),
        (NO_DEVICES, 6, (None, "exit 6: No devices were found")),
        (NO_DRIVER, 9, (None, "exit 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA")),
        (NO_PERMISSION, 4, (None, "exit 4: Failed to initialize NVML: Insufficient Permissions")),
    ],
    ids=["two-gpus", "no-devices", "no-driver", "no-permission"],
)
def test_read_gpus_names_what_nvidia_smi_said(tmp_path, out, code, expected):
    program = fake_nvidia_smi(tmp_path, out, code)
    reading = read_gpus(program)
    assert reading.gpus == expected[0] and reading.absent is False
    if expected[1] is None:
        assert reading.error is None
    else:
        assert reading.error.startswith(f"{program} {expected[1]}"), reading.error


def test_read_gpus_without_nvidia_smi_says_so(tmp_path):
    reading = read_gpus(str(tmp_path / "nvidia-smi"))
    assert reading == (None, f"no {tmp_path / 'nvidia-smi'} on PATH", True)


def test_an_nvidia_smi_that_hangs_is_given_up_on_and_named(tmp_path, monkeypatch):
    monkeypatch.setattr(idle_look, "GPU_TIMEOUT", 1)
    program = tmp_path / "nvidia-smi"
    program.write_text("#!/bin/sh\nsleep 60\n")  # as on a GPU fallen off the bus
    program.chmod(0o755)
    started = time.monotonic()
    reading = read_gpus(str(program))
    assert reading.gpus is None and reading.error == f"{program} did not answer in 1 s" and not reading.absent
    assert time.monotonic() - started < 5


# ---------------------------------------------------------------- a real pseudo-terminal
@pytest.fixture
def terminal(tmp_path):
    """A pseudo-terminal of this machine, seen alone: pts_root holds a link to its /dev/pts/N only."""
    master, slave = os.openpty()
    name = os.ttyname(slave)  # /dev/pts/N
    root = tmp_path / "pts"
    root.mkdir()
    (root / Path(name).name).symlink_to(name)
    (root / "ptmx").symlink_to("/dev/ptmx")  # never a terminal of its own
    long_ago = time.time() - 3600
    os.utime(name, (long_ago, os.stat(name).st_mtime))  # untouched for an hour
    yield master, slave, str(root), Path(name).name, long_ago
    os.close(master)
    os.close(slave)


def test_a_key_read_from_a_terminal_is_its_newest_input_and_output_is_not(terminal):
    master, slave, root, n, long_ago = terminal
    at, where = last_terminal_input(root)
    assert at == pytest.approx(long_ago, abs=1) and where == f"pts/{n} ({pwd.getpwuid(os.getuid()).pw_name})"
    os.write(slave, b"output to the screen\n")  # the mtime moves, not the atime
    assert last_terminal_input(root)[0] == pytest.approx(long_ago, abs=1)
    os.write(master, b"ls\n")  # a key typed ...
    assert os.read(slave, 100) == b"ls\n"  # ... and read by the shell
    typed, where = last_terminal_input(root)
    assert abs(typed - time.time()) < 10  # the kernel keeps a tty's times to 8 s
    assert where.startswith(f"pts/{n} (")


def test_no_terminal_is_no_input(tmp_path):
    assert last_terminal_input(str(tmp_path)) is None
    assert last_terminal_input(str(tmp_path / "absent")) is None


# ---------------------------------------------------------------- KEEP_ALIVE_COMMAND
@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("true", (True, None)),
        ("exit 1", (False, None)),
        ("pgrep -f no-such-process-of-a-test", (False, None)),  # not found in the shell that runs it
        ("pgrep -f 'sleep 31.4159'", (True, None)),  # the test's own sleep runs
        ("no-such-command-of-a-test", (None, "exit 127: ")),
        ("./not-executable", (None, "exit 126: ")),
        ("kill -9 $$", (None, "ended by signal SIGKILL")),
        ("sh -c 'kill -9 $$'", (None, "ended by signal SIGKILL (exit 137)")),  # as after the OOM killer
        ("true; sleep 6 &", (True, None)),  # what it leaves in the background does not hold the verdict
    ],
)
def test_the_keep_alive_command_says_busy_not_busy_or_why_it_cannot_say(command, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "not-executable").write_text("true\n")
    sleeper = subprocess.Popen(["sleep", "31.4159"])
    try:
        verdict, why = run_keep_alive(command, timeout=10)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert verdict == expected[0]
    assert (why or "").startswith(expected[1] or "") and (why is None) == (expected[1] is None), why


def test_a_keep_alive_command_past_its_timeout_fails_and_what_it_started_is_ended(tmp_path):
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    verdict, why = run_keep_alive(f"sleep 60 & echo $! > {pid_file}; wait", timeout=1)
    assert verdict is None and why == "ran past its 1 s timeout" and time.monotonic() - started < 10
    pid = int(pid_file.read_text())
    time.sleep(0.2)
    state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}").exists() else "gone"
    assert state in ("gone", "Z"), state  # the background sleep went with its group


# ---------------------------------------------------------------- through a tick
def test_a_tick_names_a_busy_gpu_and_records_every_gpu(tmp_path, swarm):
    cfg = config(tmp_path, swarm.port, gpu_percent=10, nvidia_smi=fake_nvidia_smi(tmp_path, TWO_GPUS))
    status, said = tick(cfg)
    assert status["action"] == "keep" and status["reason"] == "GPU 0 at 87 %" and status["fires_at"] is None, status
    assert status["gpus"] == [{"index": 0, "utilization": 87.0, "memory_used": 20321.0},
                              {"index": 1, "utilization": 0.0, "memory_used": 3.0}]  # fmt: skip
    assert said == ["<6>keep: GPU 0 at 87 %"]


def test_a_tick_without_nvidia_smi_says_the_gpus_were_not_read(tmp_path, swarm):
    cfg = config(tmp_path, swarm.port, gpu_percent=10, nvidia_smi=str(tmp_path / "nvidia-smi"))
    status, _ = tick(cfg)
    said = f"GPU not read (no {tmp_path}/nvidia-smi on PATH), idle for"
    assert status["reason"].startswith("queue empty") and said in status["reason"], status["reason"]
    assert status["gpus"] is None and status["gpu_error"] == f"no {tmp_path}/nvidia-smi on PATH"


def test_a_tick_runs_the_keep_alive_command_and_names_a_broken_one(tmp_path, swarm):
    flag = tmp_path / "training"
    flag.touch()
    cfg = config(tmp_path, swarm.port, keep_alive_command=f"test -e {flag}")
    assert tick(cfg)[0]["reason"] == "KEEP_ALIVE_COMMAND exits 0"
    flag.unlink()
    assert tick(cfg)[0]["reason"].startswith("queue empty")
    broken = config(tmp_path, swarm.port, keep_alive_command="no-such-command-of-a-test")
    status, said = tick(broken)
    assert status["reason"].startswith("KEEP_ALIVE_COMMAND exit 127: ") and "counted as busy" in status["reason"]
    assert "no-such-command-of-a-test" in said[0]


def test_a_tick_holds_the_clock_from_a_key_typed_in_a_terminal(tmp_path, swarm, terminal):
    master, slave, root, n, _ = terminal
    cfg = config(tmp_path, swarm.port, shell=True, pts_root=root)
    first, _ = tick(cfg)
    assert "typed" not in first["reason"]  # an hour untouched
    time.sleep(1.1)  # a tty's times are whole seconds: a key in the same second is no later than the clock
    os.write(master, b"x\n")
    os.read(slave, 10)
    second, _ = tick(cfg)
    assert f"typed in pts/{n} (" in second["reason"], second["reason"]
    typed_at = last_terminal_input(root)[0]
    assert second["memory"]["idle_since"] == typed_at > first["memory"]["idle_since"]  # the clock from the key


def test_the_config_reads_the_switches_as_the_role_writes_them(tmp_path):
    path = tmp_path / "c.json"
    base = {"server_id": "s", "auth_url": "http://127.0.0.1:1/v3", "credential_id": None, "credential_secret": None}
    path.write_text(json.dumps(base | {"gpu_percent": "off", "shell": "False", "keep_alive_command": None,
                                       "hung_seconds": "off"}))  # fmt: skip
    cfg = idle_killer.Config.load(path)
    assert cfg.gpu_percent is None and cfg.shell is False and cfg.keep_alive_command == ""
    assert cfg.limits().gpu_percent is None and cfg.limits().hung_seconds is None
    path.write_text(json.dumps(base | {"gpu_percent": "25", "shell": True, "keep_alive_command": "true",
                                       "hung_seconds": "3600"}))  # fmt: skip
    cfg = idle_killer.Config.load(path)
    assert cfg.gpu_percent == 25.0 and cfg.shell is True and cfg.limits().gpu_percent == 25.0
    assert cfg.limits().hung_seconds == 3600.0
    path.write_text(json.dumps(base))
    defaults = idle_killer.Config.load(path)
    assert defaults.gpu_percent == 10.0 and defaults.shell is True and defaults.keep_alive_command == ""


def test_the_config_reads_billing_as_the_role_writes_it(tmp_path):
    path = tmp_path / "c.json"
    base = {"server_id": "s", "auth_url": "http://127.0.0.1:1/v3", "credential_id": None, "credential_secret": None}
    path.write_text(json.dumps(base | {"billing_hour": "rental", "billing_margin_seconds": "180.0",
                                       "rental_started_at": "2026-12-02T14:05:09Z"}))  # fmt: skip
    limits = idle_killer.Config.load(path).limits()
    assert limits.billing_hour == "rental" and limits.billing_margin_seconds == 180.0
    assert limits.rental_started_at == 1796220309.0  # Nova's created, UTC
    path.write_text(json.dumps(base | {"billing_hour": "rental", "rental_started_at": "1796220309.5"}))
    assert idle_killer.Config.load(path).rental_started_at == 1796220309.5  # as text, from -e
    path.write_text(json.dumps(base | {"billing_hour": "hourly"}))
    with pytest.raises(ValueError, match="billing_hour 'hourly' is none of off, clock, rental"):
        idle_killer.Config.load(path)
    path.write_text(json.dumps(base | {"rental_started_at": None}))
    assert idle_killer.Config.load(path).limits().billing_hour == "off"


# ---------------------------------------------------------------- the LLM runtime (issue 17)
# Ollama's docs/api.md, "List Running Models": GET /api/ps, its example answer as it is
OLLAMA_PS = {
    "models": [
        {
            "name": "mistral:latest",
            "model": "mistral:latest",
            "size": 5137025024,
            "digest": "2ae6f6dd7a3dd734790bbbf58b8909a606e0e7e97e94b7604e0aa7ae4490e6d8",
            "details": {
                "parent_model": "",
                "format": "gguf",
                "family": "llama",
                "families": ["llama"],
                "parameter_size": "7.2B",
                "quantization_level": "Q4_0",
            },
            "expires_at": "2024-06-04T14:38:31.83753-07:00",
            "size_vram": 5137025024,
        }
    ]
}
MISTRAL_EXPIRES = datetime(2024, 6, 4, 21, 38, 31, 837530, tzinfo=UTC).timestamp()


def llamacpp_slot(n: int, processing: bool) -> dict:
    """One slot of llama.cpp's GET /slots, as tools/server/README.md shows it (its params trimmed)."""
    return {"id": n, "id_task": 135 if processing else -1, "n_ctx": 65536, "speculative": False,
            "is_processing": processing, "params": {"n_predict": -1, "temperature": 0.8},
            "next_token": {"has_next_token": True, "has_new_line": False, "n_remain": -1, "n_decoded": 0}}  # fmt: skip


# llama-server's answer for a route it was started without (--no-slots, no --metrics): not_supported_error
def not_supported(route: str) -> tuple[int, str, bytes]:
    body = {"error": {"code": 501, "message": f"This server does not support {route} endpoint. Start it with "
                      f"`--{route}`", "type": "not_supported_error"}}  # fmt: skip
    return 501, "application/json", json.dumps(body).encode()


METRICS = b"""# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1234
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
"""


class Runtime:
    """An LLM runtime on loopback that answers each GET path as `routes` says: (status, type, body), or
    "hang" to say nothing for longer than the look waits; a path not there is a 404, as both answer it."""

    def __init__(self, routes: dict):
        self.routes = routes
        self.paths: list[str] = []  # each GET's path, in order
        runtime = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                runtime.paths.append(self.path)
                answer = runtime.routes.get(self.path, (404, "text/plain", b"404 page not found"))
                if answer == "hang":
                    time.sleep(3)
                    return
                code, kind, body = answer
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def runtime():
    servers = []

    def serve(routes: dict) -> Runtime:
        servers.append(Runtime(routes))
        return servers[-1]

    yield serve
    for server in servers:
        server.close()


def as_json(answer: object, code: int = 200) -> tuple[int, str, bytes]:
    return code, "application/json; charset=utf-8", json.dumps(answer).encode()


def test_ollama_lists_its_loaded_models_with_when_their_keep_alive_ends(runtime):
    ollama = runtime({"/api/ps": as_json(OLLAMA_PS)})
    assert llm_look("ollama", ollama.url) == LlmLook("ollama", models=(("mistral:latest", MISTRAL_EXPIRES),))
    ollama.routes["/api/ps"] = as_json({"models": []})  # nothing loaded: Ollama answers an empty list
    assert llm_look("ollama", ollama.url) == LlmLook("ollama", models=())


def test_llamacpp_tells_each_slots_work(runtime):
    server = runtime({"/slots": as_json([llamacpp_slot(0, True), llamacpp_slot(1, False)])})
    assert llm_look("llamacpp", server.url) == LlmLook("llamacpp", slots=(True, False))


def test_llamacpp_that_sleeps_is_read_from_props_alone_which_neither_wakes_it_nor_keeps_it_awake(runtime):
    """/slots and /metrics are tasks to llama-server (server-context.cpp): asked each tick they would wake a
    sleeping model or restart its countdown, and it would never give its VRAM back."""
    slots = as_json([llamacpp_slot(0, True)])
    server = runtime({"/props": as_json({"total_slots": 4, "is_sleeping": False}), "/slots": slots})
    assert llm_look("llamacpp", server.url) == LlmLook("llamacpp", awake=True)
    server.routes["/props"] = as_json({"total_slots": 4, "is_sleeping": True})
    assert llm_look("llamacpp", server.url) == LlmLook("llamacpp", awake=False)
    assert server.paths == ["/props", "/props"]  # never /slots
    # a build whose /props tells no is_sleeping: its slots are read
    server.routes["/props"] = as_json({"total_slots": 4})
    assert llm_look("llamacpp", server.url) == LlmLook("llamacpp", slots=(True,))
    # loading (every route answers 503 Loading model): it runs and does not tell
    server.routes["/props"] = as_json({"error": {"code": 503, "message": "Loading model"}}, 503)
    look = llm_look("llamacpp", server.url)
    assert look.silent is True and look.error == "HTTP 503 Service Unavailable", look


def test_llamacpp_without_slots_is_read_from_its_metrics_and_without_both_only_named(runtime):
    server = runtime({"/slots": not_supported("slots"), "/metrics": (200, "text/plain; version=0.0.4", METRICS)})
    assert llm_look("llamacpp", server.url) == LlmLook("llamacpp", requests=3)  # 1 processing + 2 deferred
    server.routes["/metrics"] = not_supported("metrics")
    look = llm_look("llamacpp", server.url)
    assert look.error == "/slots off (HTTP 501 Not Implemented), /metrics off (HTTP 501 Not Implemented)"
    assert look.silent is False and look.slots is None and look.requests is None


def test_nothing_listening_is_not_silent_it_can_run_nothing():
    look = llm_look("ollama", f"http://127.0.0.1:{free_port()}")
    assert look.error == "[Errno 111] Connection refused" and look.silent is False and look.models == ()


@contextlib.contextmanager
def not_http():
    """A port that answers an SSH banner to anything: http.client's BadStatusLine, which is no OSError."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def banner():
            with contextlib.suppress(OSError):
                while True:
                    conn, _ = listener.accept()
                    with conn:  # the request read first: closing on unread bytes would be a reset, an OSError
                        conn.settimeout(5)
                        conn.recv(65536)
                        conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
                        conn.shutdown(socket.SHUT_WR)
                        while conn.recv(65536):
                            pass

        threading.Thread(target=banner, daemon=True).start()
        yield listener.getsockname()[1]


@pytest.mark.parametrize("kind", ["ollama", "llamacpp"])
def test_a_port_that_does_not_speak_http_is_silent_trouble_never_a_broken_tick(kind):
    """Something else on LLM_REMOTE_PORT (an SSH banner, a raw TCP service): escaping the look, the
    BadStatusLine would stop every tick (and so every deletion)."""
    with not_http() as port:
        look = llm_look(kind, f"http://127.0.0.1:{port}")
    assert look.error == "not an HTTP answer (BadStatusLine)" and look.silent is True


def test_swarmui_and_comfyui_cut_short_are_answers_that_failed_never_a_broken_tick():
    """A SwarmUI or ComfyUI restarting may cut its answer: the look says so as it does for a refusal."""
    with not_http() as port:
        with pytest.raises(ValueError, match=r"not an HTTP answer \(BadStatusLine\)"):
            idle_look._post_json(f"http://127.0.0.1:{port}/API/GetNewSession", {})
        assert idle_look.comfy_queues((port,)) == [{"port": port, "queue": None}]


@pytest.mark.parametrize(
    ("runtime_kind", "routes", "error"),
    [
        ("ollama", {"/api/ps": as_json({"error": "boom"}, 500)}, "HTTP 500 Internal Server Error"),
        ("ollama", {"/api/ps": (200, "text/html", b"<html>not ollama</html>")}, "Expecting value"),
        ("ollama", {"/api/ps": as_json({"running": []})}, "'models'"),
        # llama-server answers 503 while it loads its model (tools/server: ERROR_TYPE_UNAVAILABLE)
        ("llamacpp", {"/slots": as_json({"error": {"code": 503, "message": "Loading model",
                                                   "type": "unavailable_error"}}, 503)},
         "HTTP 503 Service Unavailable"),
        ("llamacpp", {"/slots": as_json([{"id": 0, "busy": True}])}, "not a list of slots with is_processing"),
        ("llamacpp", {"/slots": not_supported("slots"), "/metrics": (200, "text/plain", b"# nothing\n")},
         "'llamacpp:requests_processing'"),
        ("ollama", {"/api/ps": "hang"}, "timed out"),
    ],
)  # fmt: skip
def test_a_runtime_that_answers_without_telling_is_silent(runtime, runtime_kind, routes, error):
    look = llm_look(runtime_kind, runtime(routes).url, timeout=1)
    assert look.silent is True and error in look.error, look


def test_go_times_are_read_to_the_microsecond_in_any_zone():
    assert go_time("2024-06-04T14:38:31.83753-07:00") == MISTRAL_EXPIRES
    assert go_time("2026-12-02T14:05:09.123456789Z") == pytest.approx(1796220309.123456)
    assert go_time("2026-12-02T14:05:09Z") == 1796220309.0
    assert go_time("2318-03-10T01:02:03.5+03:00") > time.time() + 290 * 365 * 86400  # Ollama's "for ever"
    assert go_time("soon") is None and go_time(None) is None and go_time(1796220309) is None


def test_a_tick_names_a_loaded_model_and_records_what_the_runtime_told(tmp_path, swarm, runtime):
    soon = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 4 * 60 + 30))
    ps = {"models": [OLLAMA_PS["models"][0] | {"name": "llama3.2:1b", "model": "llama3.2:1b", "expires_at": soon}]}
    ollama = runtime({"/api/ps": as_json(ps)})
    cfg = config(tmp_path, swarm.port, llm_runtime="ollama", llm_url=ollama.url)
    status, said = tick(cfg)
    assert status["action"] == "keep" and status["fires_at"] is None
    assert status["reason"] == "LLM runtime: model llama3.2:1b loaded (keep-alive for 4 min more)", status["reason"]
    assert said == ["<6>keep: LLM runtime: model llama3.2:1b loaded (keep-alive for 4 min more)"]
    assert status["llm"]["runtime"] == "ollama" and status["llm"]["models"][0][0] == "llama3.2:1b"
    ollama.routes["/api/ps"] = as_json({"models": []})
    status, _ = tick(cfg)
    assert status["reason"].startswith("queue empty") and "no Ollama model loaded, idle for 0 min" in status["reason"]
    off = config(tmp_path, swarm.port, llm_runtime="ollama", llm_url=ollama.url, llm="false")  # IDLE_LLM=off
    status, _ = tick(off)
    assert status["llm"] is None and "Ollama" not in status["reason"]


def test_the_config_reads_the_llm_runtime_as_the_role_writes_it(tmp_path):
    path = tmp_path / "c.json"
    base = {"server_id": "s", "auth_url": "http://127.0.0.1:1/v3", "credential_id": None, "credential_secret": None}
    path.write_text(json.dumps(base | {"llm_runtime": "llamacpp", "llm_url": "http://127.0.0.1:8080", "llm": "True"}))
    cfg = idle_killer.Config.load(path)
    assert (cfg.llm_runtime, cfg.llm_url, cfg.llm) == ("llamacpp", "http://127.0.0.1:8080", True)
    path.write_text(json.dumps(base | {"llm_runtime": "ollama", "llm": False}))
    assert idle_killer.Config.load(path).llm is False
    path.write_text(json.dumps(base))
    defaults = idle_killer.Config.load(path)
    assert (defaults.llm_runtime, defaults.llm_url, defaults.llm) == ("none", "http://127.0.0.1:11434", True)
    path.write_text(json.dumps(base | {"llm_runtime": "vllm"}))
    with pytest.raises(ValueError, match="llm_runtime 'vllm' is none of none, ollama, llamacpp"):
        idle_killer.Config.load(path)


# ------------------------------------------------- upstream-llm-audit U6: installs SwarmUI's service runs
@pytest.mark.parametrize(
    ("argv", "said"),
    [  # SwarmUI's DoPythonCall (ComfyInstallFeatures -> EnsureNodeRepo, DoLibFixes, ComfyUpdateTorch)
        (["/opt/swarmui/dlbackend/ComfyUI/venv/bin/python", "-s", "-m", "pip", "install", "-r", "/x/requirements.txt"],
         "installing: pip install -r /x/requirements.txt"),
        (["python3", "-s", "-m", "pip", "uninstall", "-y", "torch"], "installing: pip uninstall -y torch"),
        # ComfyUI-Manager: sys.executable -m pip, or -m uv pip with its use_uv
        (["/venv/bin/python3.11", "-m", "uv", "pip", "install", "x"], "installing: uv pip install x"),
        (["/venv/bin/python3", "-mpip", "install", "x"], "installing: pip install x"),
        # a pip script run by its shebang: the kernel's argv is the interpreter, then the script
        (["/venv/bin/python3", "/venv/bin/pip3", "install", "--no-cache-dir", "x"],
         "installing: pip install --no-cache-dir x"),
        (["/venv/bin/pip", "download", "x"], "installing: pip download x"),
        (["uv", "sync"], "installing: uv sync"),
        # Utilities.RunGitProcess: `git clone <url>`, the auto-update's pull, CheckForUpdates' fetch
        (["git", "clone", "https://github.com/a/b"], "installing: git clone https://github.com/a/b"),
        (["/usr/bin/git", "-C", "/opt/swarmui/dlbackend/ComfyUI", "pull", "--autostash"],
         "installing: git -C /opt/swarmui/dlbackend/ComfyUI pull --autostash"),
        (["git", "-c", "k=v", "fetch"], "installing: git -c k=v fetch"),
        # UtilAPI.Pickle2SafeTensor through PythonLaunchHelper.LaunchGeneric
        (["./dlbackend/ComfyUI/venv/bin/python", "launchtools/pickle-to-safetensors.py", "Models/Lora", "true"],
         "converting: pickle-to-safetensors.py Models/Lora true"),
        # no install: ComfyUI itself, SwarmUI, reads, git's helpers, a python -c
        (["/venv/bin/python3", "-s", "main.py", "--port", "7821"], None),
        (["/root/.dotnet/dotnet", "src/bin/live_release/SwarmUI.dll"], None),
        (["python3", "-m", "pip", "list"], None),
        (["python3", "-m", "pip", "--version"], None),
        (["git", "rev-parse", "HEAD"], None),
        (["git", "-C", "pull", "status"], None),  # -C takes a value: "pull" is the folder here
        (["/usr/lib/git-core/git-remote-https", "origin", "https://github.com/a/b"], None),
        (["git", "index-pack", "--stdin"], None),
        (["python3", "-c", "import pip; pip.main(['install', 'x'])"], None),
        (["uv", "pip", "list"], None),
        ([], None),
    ],
)  # fmt: skip
def test_an_install_or_a_conversion_is_told_by_its_command_line(argv, said):
    assert idle_look.install_work(argv) == said


def test_installs_are_read_from_the_services_processes_once_each(tmp_path):
    proc = tmp_path / "proc"
    for pid, unit, argv in [
        (11, "swarmui.service", ["/venv/bin/python3", "-s", "-m", "pip", "install", "x"]),
        (12, "swarmui.service", ["/venv/bin/python3", "-s", "-m", "pip", "install", "x"]),  # pip's own child
        (13, "swarmui.service", ["/venv/bin/python3", "-s", "main.py", "--port", "7821"]),
        (14, "user@0.service", ["git", "clone", "https://github.com/a/b"]),  # the user's own, in a shell
    ]:
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(f"0::/system.slice/{unit}\n")
        (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    commands = idle_look.unit_commands(str(tmp_path / "no-cgroup"), "swarmui.service", str(proc))
    assert idle_look.installs_of(commands) == ("installing: pip install x",)
    assert idle_look.comfy_ports_of(commands) == (7821,)


def test_a_tick_names_a_pip_install_under_swarmuis_service_as_capped_trouble(tmp_path, swarm):
    """A real process, as pip runs: its script started through its shebang (argv: the interpreter, the script)."""
    pip = tmp_path / "venv" / "bin" / "pip"
    pip.parent.mkdir(parents=True)
    pip.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    pip.chmod(0o755)
    installing = subprocess.Popen([str(pip), "install", "sageattention"])
    try:
        cfg = config(tmp_path, swarm.port)
        cgroup_root(tmp_path, (installing.pid,))
        status, _ = tick(cfg)
        assert status["action"] == "keep" and status["fires_at"] is None, status
        assert status["reason"] == "SwarmUI installing: pip install sageattention: counted as busy for 20 min more"
    finally:
        installing.kill()
        installing.wait()
    cgroup_root(tmp_path, ())
    assert tick(cfg)[0]["reason"].startswith("queue empty")


def fake_systemctl(tmp_path: Path, began_ago: float) -> Path:
    """systemctl show as systemd answers it for a oneshot unit; its ActiveState from $STATE."""
    fake = tmp_path / "bin" / "systemctl"
    fake.parent.mkdir(exist_ok=True)
    began = int((time.monotonic() - began_ago) * 1e6)
    fake.write_text(f"#!/bin/sh\nprintf 'ActiveState=%s\\nInactiveExitTimestampMonotonic={began}\\n' \"$STATE\"\n")
    fake.chmod(0o755)
    return fake


def test_a_unit_still_starting_says_since_when_and_any_other_state_says_nothing(tmp_path, monkeypatch):
    """systemctl show of the data volume's boot-time grow while resize2fs runs: activating, since the moment it
    left inactive (CLOCK_MONOTONIC in microseconds, made a unix time)."""
    fake, now = str(fake_systemctl(tmp_path, 90)), time.time()
    monkeypatch.setenv("STATE", "activating")
    assert idle_look.unit_starting_since("gpu-rent-grow-data.service", now, fake) == pytest.approx(now - 90, abs=2)
    monkeypatch.setenv("STATE", "inactive")
    assert idle_look.unit_starting_since("gpu-rent-grow-data.service", now, fake) is None
    assert idle_look.unit_starting_since("x.service", now, str(tmp_path / "none")) is None  # no systemctl


def test_a_tick_while_the_data_volume_is_grown_at_boot_keeps_the_vm_and_names_it(tmp_path, swarm, monkeypatch):
    fake = fake_systemctl(tmp_path, 120)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STATE", "activating")
    (tmp_path / "data").mkdir()
    status, _ = tick(config(tmp_path, swarm.port, data_mount=str(tmp_path / "data")))
    assert status["action"] == "keep" and status["fires_at"] is None
    assert status["reason"].startswith("the data volume's filesystem grown at boot (resize2fs, 2 min so far)")
    assert f"data volume not mounted at {tmp_path / 'data'}" in status["reason"]
