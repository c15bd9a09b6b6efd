"""The Ollama stand-in answers as upstream Ollama v0.32.15 does, pulling from the registry stand-in.

Both run here as real processes on free loopback ports, in tmp dirs: `bin/ollama serve` as the VM runs the one out of
the release archive (its shebang finds the system python3), registry.py as the ground serves models. The parsers
run in-process against the tables of upstream's own tests. Each test names the upstream behaviour it pins (the
stand-in's README lists each with its upstream file); a stand-in that drifts from upstream fails here. It stays one
file: every test starts the same two processes through the helpers at its top.
"""

import contextlib
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from gpu_rent.on_vm import idle_look
from tests.module_file import load

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "ground" / "ollama-standin"
sys.path.insert(0, str(STANDIN / "lib" / "ollama"))  # where bin/ollama finds the package

from ollama_standin import envconfig, gotypes, names  # noqa: E402

registry = load("ollama_standin_registry", STANDIN / "registry.py")
release = load("ollama_standin_release", STANDIN / "release.py")

UPSTREAM_VERSION = "0.32.15"  # the tag the stand-in follows (its README, ollama_standin.VERSION)
MB = 1000 * 1000  # format.MegaByte: download.go's part sizes are decimal


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def spawn(argv: list, out: Path, env: dict) -> subprocess.Popen:
    with out.open("ab") as sink:  # a file, not a pipe nobody drains: a full pipe would stall the server
        return subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def call(port: int, method: str, path: str, body=None, headers=None, timeout: float = 30) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        conn.request(method, path, data, headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def api(port: int, method: str, path: str, body=None) -> tuple[int, dict]:
    code, _, data = call(port, method, path, body)
    return code, json.loads(data)


def part_file(path: Path) -> dict | None:
    """A blob's -partial-N record; None while it is absent or being rewritten."""
    with contextlib.suppress(OSError, ValueError):
        return json.loads(path.read_text())
    return None


def wait_for(check, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what} not met in {timeout} s"
        time.sleep(0.05)
    return value


class Registry:
    def __init__(self, root: Path, bytes_per_second: int = 0, direct_blobs: bool = False):
        self.dir, self.port = root, free_port()
        argv = [sys.executable, str(STANDIN / "registry.py"), "serve", "--dir", str(root), "--port", str(self.port),
                "--bytes-per-second", str(bytes_per_second)] + (["--direct-blobs"] if direct_blobs else [])  # fmt: skip
        self.proc = spawn(argv, root.parent / f"{root.name}.log", {"PATH": "/usr/bin:/bin"})
        wait_for(lambda: self._up(), what="registry up")

    def _up(self) -> bool:
        assert self.proc.poll() is None, (self.dir.parent / f"{self.dir.name}.log").read_text()
        with contextlib.suppress(OSError):
            return api(self.port, "GET", "/v2/")[0] == 200
        return False

    def model(self, name: str = "library/tiny:latest") -> str:
        return f"127.0.0.1:{self.port}/{name}"

    def blob_bytes(self) -> int:
        return api(self.port, "GET", "/standin/stats")[1]["blob_bytes"]

    def throttle(self, bytes_per_second: int) -> None:
        api(self.port, "POST", "/standin/throttle", {"bytes_per_second": bytes_per_second})


class Ollama:
    def __init__(self, root: Path, models: Path | None = None, env: dict | None = None, binary: Path | None = None,
                 port: int | None = None, host: str | None = None):  # fmt: skip
        self.port, self.home, self.out = port or free_port(), root / "home", root / "ollama.out"
        self.home.mkdir(parents=True, exist_ok=True)
        self.models = models or self.home / ".ollama" / "models"
        self.env = {"PATH": "/usr/bin:/bin", "HOME": str(self.home), "OLLAMA_HOST": host or f"127.0.0.1:{self.port}"}
        if models is not None:
            self.env["OLLAMA_MODELS"] = str(models)
        self.env.update(env or {})
        self.proc = spawn([str(binary or STANDIN / "bin" / "ollama"), "serve"], self.out, self.env)
        wait_for(self._up, what="ollama serve up")

    def _up(self) -> bool:
        assert self.proc.poll() is None, self.out.read_text()
        with contextlib.suppress(OSError):
            return call(self.port, "GET", "/")[0] == 200
        return False

    def pull(self, model: str, **extra) -> list[dict]:
        """The NDJSON lines of a streamed /api/pull."""
        code, headers, data = call(self.port, "POST", "/api/pull", {"model": model, **extra})
        assert code == 200 and headers["Content-Type"] == "application/x-ndjson", (code, headers, data)
        return [json.loads(line) for line in data.splitlines()]

    def ps(self) -> list[dict]:
        code, answer = api(self.port, "GET", "/api/ps")
        assert code == 200
        return answer["models"]


@pytest.fixture
def servers(tmp_path):
    """Start registries and servers; every one is killed at the end."""
    started = []

    def start(kind, *args, **kwargs):
        started.append(kind(*args, **kwargs))
        return started[-1]

    yield start
    for server in started:
        stop(server.proc)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """A models directory with the tiny model pulled in, for the tests that need one without a pull."""
    root = tmp_path_factory.mktemp("seed")
    written = registry.write_model(root / "registry", size=2 * MB)
    reg = Registry(root / "registry")
    ollama = Ollama(root / "ollama", models=root / "models")
    try:
        lines = ollama.pull(reg.model(), insecure=True)
        assert lines[-1] == {"status": "success"}, lines
        yield {"models": root / "models", "model": reg.model(), "written": written}
    finally:
        stop(ollama.proc)
        stop(reg.proc)


@pytest.fixture
def ollama(tmp_path, seeded, servers):
    """A server of its own on a copy of the seeded models directory."""
    shutil.copytree(seeded["models"], tmp_path / "models")
    return servers(Ollama, tmp_path, models=tmp_path / "models")


# envconfig/config_test.go TestHost, as upstream has it
HOSTS = {"": "http://127.0.0.1:11434", "1.2.3.4": "http://1.2.3.4:11434", ":1234": "http://:1234",
         "1.2.3.4:1234": "http://1.2.3.4:1234", "example.com": "http://example.com:11434",
         "example.com:1234": "http://example.com:1234", ":0": "http://:0", ":66000": "http://:11434",
         ":-1": "http://:11434", "[::1]": "http://[::1]:11434", "[::]": "http://[::]:11434", "::1": "http://[::1]:11434",
         "[::1]:1337": "http://[::1]:1337", " 1.2.3.4 ": "http://1.2.3.4:11434", '"1.2.3.4"': "http://1.2.3.4:11434",
         ' " 1.2.3.4 " ': "http://1.2.3.4:11434", "'1.2.3.4'": "http://1.2.3.4:11434",
         "http://1.2.3.4": "http://1.2.3.4:80", "http://1.2.3.4:4321": "http://1.2.3.4:4321",
         "https://1.2.3.4": "https://1.2.3.4:443", "https://1.2.3.4:4321": "https://1.2.3.4:4321",
         "https://example.com/ollama": "https://example.com:443/ollama",
         "ollama.com": "https://ollama.com:443"}  # fmt: skip
# TestKeepAlive, in nanoseconds
KEEP_ALIVE = {"": 300, "1s": 1, "1m": 60, "1h": 3600, "5m0s": 300, "1h2m3s": 3723, "0": 0, "60": 60, "120": 120,
              "3600": 3600, "-0": 0, "-1": None, "-1m": None, " ": 300, "???": 300, "1d": 300, "1y": 300,
              "1w": 300}  # fmt: skip  # None: forever


def test_ollama_host_and_keep_alive_parse_as_upstream_tests_say(monkeypatch):
    for value, want in HOSTS.items():
        monkeypatch.setenv("OLLAMA_HOST", value)
        assert str(envconfig.host()) == want, value
    for value, seconds in KEEP_ALIVE.items():
        monkeypatch.setenv("OLLAMA_KEEP_ALIVE", value)
        assert envconfig.keep_alive() == (gotypes.MAX_DURATION if seconds is None else seconds * 10**9), value
    # time.ParseDuration's messages, which a request's bad keep_alive answers with
    for text, message in (("5", 'time: missing unit in duration "5"'), ("", 'time: invalid duration ""'),
                          ("1d", 'time: unknown unit "d" in duration "1d"')):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            gotypes.parse_duration(text)
    assert gotypes.parse_duration("1.5s") == 1_500_000_000


def test_model_names_parse_as_upstream_name_test():
    """types/model/name_test.go TestParseNameParts: parts and the manifest's file path."""
    cases = {"registry.ollama.ai/library/dolphin-mistral:7b-v2.6-dpo-laser-q6_K":
             ("registry.ollama.ai", "library", "dolphin-mistral", "7b-v2.6-dpo-laser-q6_K"),
             "host:port/namespace/model:tag": ("host:port", "namespace", "model", "tag"),
             "host:port/namespace/model": ("host:port", "namespace", "model", "latest"),
             "namespace/model": ("registry.ollama.ai", "namespace", "model", "latest"),
             "model": ("registry.ollama.ai", "library", "model", "latest")}  # fmt: skip
    for text, parts in cases.items():
        assert names.parse_name(text).filepath() == os.path.join(*parts), text
    bare = names.parse_name_bare("scheme://host:port/namespace/model:tag")
    assert (bare.scheme, bare.host, bare.tag) == ("scheme", "host:port", "tag")
    assert names.parse_name("127.0.0.1:5000/library/tiny").display_shortest() == "127.0.0.1:5000/library/tiny:latest"
    assert names.parse_name("tiny").display_shortest() == "tiny:latest"
    assert not names.parse_name("a/b/c/d").is_valid() and not names.parse_name("bad..ns/m").is_valid()


def test_root_version_and_routes_answer_as_upstream(ollama):
    """routes.go GenerateRoutes; cmd.go versionHandler; gin's 404/405; allowedHostsMiddleware."""
    assert call(ollama.port, "GET", "/")[::2] == (200, b"Ollama is running")
    code, headers, body = call(ollama.port, "HEAD", "/")
    assert (code, body, headers["Content-Length"]) == (200, b"", "17")
    code, headers, body = call(ollama.port, "GET", "/api/version")
    assert (code, headers["Content-Type"], json.loads(body)) == (200, "application/json; charset=utf-8",
                                                                 {"version": UPSTREAM_VERSION})  # fmt: skip
    assert call(ollama.port, "GET", "/nope")[::2] == (404, b"404 page not found")
    assert call(ollama.port, "GET", "/api/pull")[::2] == (405, b"405 method not allowed")
    assert call(ollama.port, "HEAD", "/api/ps")[0] == 405
    assert api(ollama.port, "POST", "/api/push", {"model": "x"})[0] == 501  # not imitated, and says so
    assert call(ollama.port, "GET", "/api/version", headers={"Host": "example.com"})[0] == 403
    assert call(ollama.port, "GET", "/api/version", headers={"Host": "localhost:1"})[0] == 200
    out = subprocess.run([str(STANDIN / "bin" / "ollama"), "--version"], env=ollama.env, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout == f"ollama version is {UPSTREAM_VERSION}\n"
    stop(ollama.proc)
    out = subprocess.run([str(STANDIN / "bin" / "ollama"), "-v"], env=ollama.env, capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (0, "Warning: could not connect to a running Ollama instance\n"
                                               f"Warning: client version is {UPSTREAM_VERSION}\n")  # fmt: skip


def test_pull_streams_upstream_progress_and_lays_out_the_models_dir(tmp_path, servers):
    """images.go PullModel and download.go: the stream, the files, and a second pull that fetches no blob."""
    written = registry.write_model(tmp_path / "registry", size=2 * MB)
    reg = servers(Registry, tmp_path / "registry", bytes_per_second=2 * MB)
    ollama = servers(Ollama, tmp_path)  # OLLAMA_MODELS unset: $HOME/.ollama/models
    lines = ollama.pull(reg.model(), insecure=True)
    model, template = written["manifest"]["layers"]
    config = written["manifest"]["config"]
    assert lines[0] == {"status": "pulling manifest"}
    assert lines[-3:] == [{"status": "verifying sha256 digest"}, {"status": "writing manifest"}, {"status": "success"}]
    progress = [line for line in lines[1:-3] if line["status"] == f"pulling {model['digest'][7:19]}"]
    assert len(progress) >= 5, lines  # every 60 ms while the throttled blob comes in
    assert all(p["digest"] == model["digest"] and p["total"] == model["size"] for p in progress)
    completed = [p.get("completed", 0) for p in progress]  # omitempty: no "completed" before the first byte
    assert completed == sorted(completed) and 0 < completed[-1] <= model["size"]
    pulling = {f"pulling {d['digest'][7:19]}" for d in (model, template, config)}
    assert {line["status"] for line in lines[1:-3]} <= pulling and not [line for line in lines if "error" in line]

    models = ollama.home / ".ollama" / "models"
    manifest = models / "manifests" / f"127.0.0.1:{reg.port}" / "library" / "tiny" / "latest"
    assert manifest.read_bytes() == written["raw"]  # the registry's bytes, as they came
    blobs = {f"sha256-{layer['digest'][7:]}": layer for layer in (model, template, config)}
    assert sorted(p.name for p in (models / "blobs").iterdir()) == sorted(blobs)  # no partial left
    for name, layer in blobs.items():
        assert hashlib.sha256((models / "blobs" / name).read_bytes()).hexdigest() == layer["digest"][7:]

    fetched = reg.blob_bytes()
    assert fetched == model["size"] + template["size"] + config["size"]
    again = ollama.pull(reg.model(), insecure=True)
    assert reg.blob_bytes() == fetched  # every blob a cache hit
    assert [line for line in again if "digest" in line] == [
        {"status": f"pulling {d['digest'][7:19]}", "digest": d["digest"], "total": d["size"], "completed": d["size"]}
        for d in (model, template, config)]  # fmt: skip
    assert again[-1] == {"status": "success"}
    code, headers, body = call(ollama.port, "POST", "/api/pull", {"model": reg.model(), "insecure": True,
                                                                  "stream": False})  # fmt: skip
    assert (code, headers["Content-Type"], json.loads(body)) == (200, "application/json", {"status": "success"})


def test_tags_show_and_delete_answer_upstream_shapes(ollama, seeded):
    """ListHandler (model_list_cache.go), ShowHandler (GetModelInfo), DeleteHandler."""
    written = seeded["written"]
    code, tags = api(ollama.port, "GET", "/api/tags")
    assert code == 200 and len(tags["models"]) == 1
    entry = tags["models"][0]
    name = seeded["model"]
    assert list(entry) == ["name", "model", "modified_at", "size", "digest", "details", "capabilities"]
    assert (entry["name"], entry["model"], entry["size"], entry["digest"]) == (name, name, written["size"],
                                                                                written["digest"])  # fmt: skip
    assert entry["details"] == {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                                "parameter_size": "1.0M", "quantization_level": "Q4_K_M", "context_length": 2048,
                                "embedding_length": 64}  # fmt: skip
    assert entry["capabilities"] == ["completion"]
    manifest = next((Path(ollama.env["OLLAMA_MODELS"]) / "manifests").rglob("latest"))
    assert abs(go_time(entry["modified_at"]) - manifest.stat().st_mtime) < 0.001  # the manifest file's time

    code, shown = api(ollama.port, "POST", "/api/show", {"model": seeded["model"]})
    assert code == 200
    assert list(shown) == ["modelfile", "template", "details", "model_info", "capabilities", "modified_at"]
    assert shown["template"] == "{{ .Prompt }}" and shown["capabilities"] == ["completion"]
    assert shown["model_info"]["general.architecture"] == "llama" and "general.name" not in shown["model_info"]
    assert shown["modelfile"].startswith(f'# Modelfile generated by "ollama show"\n# To build a new Modelfile based '
                                         f"on this, replace FROM with:\n# FROM {name}\n\nFROM ")  # fmt: skip
    unknown = api(ollama.port, "POST", "/api/show", {"model": "nothere"})
    assert unknown == (404, {"error": "model 'nothere:latest' not found"})  # show names it as DisplayShortest does

    code, _, body = call(ollama.port, "DELETE", "/api/delete", {"model": seeded["model"]})
    assert (code, body) == (200, b"")
    assert api(ollama.port, "GET", "/api/tags") == (200, {"models": []})
    assert list((Path(ollama.env["OLLAMA_MODELS"]) / "blobs").iterdir()) == []  # RemoveLayers: no one else uses them
    assert api(ollama.port, "DELETE", "/api/delete", {"model": seeded["model"]}) == (
        404, {"error": f"model '{seeded['model']}' not found"})  # fmt: skip


def go_time(text: str) -> float:
    """A time.Time as Go's MarshalJSON writes it (RFC 3339, up to nanoseconds), as a Unix time."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,9})?(Z|[+-]\d\d:\d\d)", text)
    assert m, text
    stamp = datetime.fromisoformat(m[1] + ("+00:00" if m[3] == "Z" else m[3]))
    return stamp.timestamp() + float(m[2] or 0)


def _expires_in(entry: dict) -> float:
    return go_time(entry["expires_at"]) - time.time()


def test_generate_loads_the_model_until_keep_alive_after_the_last_request(ollama, seeded):
    """GenerateHandler and sched.go: loaded while in use, expires keep_alive after, per request keep_alive wins."""
    model = seeded["model"]
    code, headers, body = call(ollama.port, "POST", "/api/generate", {"model": model, "prompt": "Why is the sky blue?",
                                                                      "keep_alive": "1s"})  # fmt: skip
    assert code == 200 and headers["Content-Type"] == "application/x-ndjson"
    chunks = [json.loads(line) for line in body.splitlines()]
    assert all(list(c) == ["model", "created_at", "response", "done"] and not c["done"] for c in chunks[:-1])
    assert chunks[0]["model"] == model and chunks[0]["created_at"].endswith("Z")
    final = chunks[-1]
    assert list(final) == ["model", "created_at", "response", "done", "done_reason", "context", "total_duration",
                           "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
                           "eval_duration"]  # fmt: skip
    assert (final["response"], final["done_reason"], final["eval_count"]) == ("", "stop", len(chunks) - 1)
    [loaded] = ollama.ps()
    assert list(loaded) == ["name", "model", "size", "digest", "details", "expires_at", "size_vram", "context_length"]
    assert (loaded["name"], loaded["model"], loaded["digest"]) == (model, model, seeded["written"]["digest"])
    assert loaded["size"] == loaded["size_vram"] == seeded["written"]["manifest"]["layers"][0]["size"]
    assert loaded["context_length"] == 2048  # the default 4096, cut to what the model was trained for
    assert 0 < _expires_in(loaded) <= 1.1
    wait_for(lambda: ollama.ps() == [], timeout=3, what="model unloaded after keep_alive 1s")

    # an empty prompt only loads; with keep_alive 0 it unloads
    load = api(ollama.port, "POST", "/api/generate", {"model": model})[1]
    assert (load["response"], load["done"], load["done_reason"]) == ("", True, "load")
    assert 290 < _expires_in(ollama.ps()[0]) <= 300  # OLLAMA_KEEP_ALIVE's default, 5m
    assert api(ollama.port, "POST", "/api/generate", {"model": model, "keep_alive": "-1"})[0] == 400  # no unit
    api(ollama.port, "POST", "/api/generate", {"model": model, "keep_alive": -1})
    # the scheduler sees a request end after its answer went out (processCompleted): poll, as for upstream
    wait_for(lambda: _expires_in(ollama.ps()[0]) > 250 * 365 * 86400, what="negative keep_alive is forever")
    unload = api(ollama.port, "POST", "/api/generate", {"model": model, "keep_alive": 0})[1]
    assert (unload["response"], unload["done_reason"]) == ("", "unload")
    assert ollama.ps() == []
    call(ollama.port, "POST", "/api/chat", {"model": model, "messages": [{"role": "user", "content": "hi"}],
                                           "keep_alive": 0})  # fmt: skip
    wait_for(lambda: ollama.ps() == [], what="keep_alive 0 on a request with work: unloaded when it ends")


def test_keep_alive_comes_from_the_environment(tmp_path, seeded, servers):
    """envconfig.KeepAlive: OLLAMA_KEEP_ALIVE whole seconds, for a request that gives none."""
    shutil.copytree(seeded["models"], tmp_path / "models")
    ollama = servers(Ollama, tmp_path, models=tmp_path / "models", env={"OLLAMA_KEEP_ALIVE": "1"})
    api(ollama.port, "POST", "/api/generate", {"model": seeded["model"]})
    assert 0 < _expires_in(ollama.ps()[0]) <= 1.1
    wait_for(lambda: ollama.ps() == [], timeout=3, what="model unloaded after OLLAMA_KEEP_ALIVE=1")


def test_a_load_holds_ps_until_the_model_is_up_and_the_killer_names_it(tmp_path, seeded, servers):
    """sched.go load holds the runner's refMu until the runner is up, and loadedModels locks it: GET /api/ps waits
    for the whole load (audit U3). The killer's look times out there, finds /api/version answering, and names a
    load, not a fault."""
    shutil.copytree(seeded["models"], tmp_path / "models")
    ollama = servers(Ollama, tmp_path, models=tmp_path / "models", env={"STANDIN_OLLAMA_LOAD_SECONDS": "3"})
    loading = threading.Thread(target=api, args=(ollama.port, "POST", "/api/generate", {"model": seeded["model"]}))
    loading.start()
    time.sleep(0.5)
    look = idle_look.llm_look("ollama", f"http://127.0.0.1:{ollama.port}", timeout=1)
    assert look.silent and look.loading and look.error.startswith("GET /api/ps waits for a model load"), look
    loading.join()
    assert [m["name"] for m in ollama.ps()] == [seeded["model"]]  # up: /api/ps answers at once again
    assert idle_look.llm_look("ollama", f"http://127.0.0.1:{ollama.port}", timeout=1).models[0][0] == seeded["model"]


def test_generate_and_chat_without_streaming_and_their_errors(ollama, seeded):
    """GenerateHandler and ChatHandler shapes with "stream": false; unknown and invalid models."""
    model = seeded["model"]
    code, headers, body = call(ollama.port, "POST", "/api/generate", {"model": model, "prompt": "hi", "stream": False})
    answer = json.loads(body)
    assert (code, headers["Content-Type"]) == (200, "application/json; charset=utf-8")
    assert answer["done"] and answer["done_reason"] == "stop" and answer["response"].strip()
    again = api(ollama.port, "POST", "/api/generate", {"model": model, "prompt": "hi", "stream": False})[1]
    assert again["response"] == answer["response"]  # deterministic
    cut = api(ollama.port, "POST", "/api/generate", {"model": model, "prompt": "hi", "stream": False,
                                                     "options": {"num_predict": 3}})[1]  # fmt: skip
    assert (cut["done_reason"], cut["eval_count"]) == ("length", 3)
    chat = api(ollama.port, "POST", "/api/chat", {"model": model, "stream": False,
                                                  "messages": [{"role": "user", "content": "hi"}]})[1]  # fmt: skip
    assert chat["message"] == {"role": "assistant", "content": answer["response"]} and "context" not in chat
    hello = [{"role": "user", "content": "hi"}]
    code, _, body = call(ollama.port, "POST", "/api/chat", {"model": model, "messages": hello})
    streamed = [json.loads(line) for line in body.splitlines()]
    assert "".join(c["message"]["content"] for c in streamed) == answer["response"]
    assert streamed[-1]["message"] == {"role": "assistant", "content": ""} and streamed[-1]["done"]

    for route in ("/api/generate", "/api/chat"):
        assert api(ollama.port, "POST", route, {"model": "nothere", "prompt": "x"}) == (
            404, {"error": "model 'nothere' not found"})  # fmt: skip
        assert api(ollama.port, "POST", route, {"model": "a/b/c/d"}) == (400, {"error": "invalid model name"})
    assert api(ollama.port, "POST", "/api/generate", {"model": model, "keep_alive": "5"}) == (
        400, {"error": 'time: missing unit in duration "5"'})  # fmt: skip
    assert api(ollama.port, "POST", "/api/generate", b"") == (400, {"error": "missing request body"})
    wrong_type = "json: cannot unmarshal number into Go struct field GenerateRequest.model of type string"
    assert api(ollama.port, "POST", "/api/generate", {"model": 5}) == (400, {"error": wrong_type})
    assert api(ollama.port, "POST", "/api/pull", {"model": ""}) == (400, {"error": "invalid model name"})


def test_a_pull_the_client_cancels_resumes_within_its_part(tmp_path, servers):
    """download.go: a cancelled part records how far it got (-partial-N), and the next pull asks only for the rest."""
    written = registry.write_model(tmp_path / "registry", size=3 * MB)
    reg = servers(Registry, tmp_path / "registry", bytes_per_second=2 * MB)
    ollama = servers(Ollama, tmp_path, models=tmp_path / "models")
    digest = written["manifest"]["layers"][0]["digest"]
    conn = http.client.HTTPConnection("127.0.0.1", ollama.port, timeout=30)
    conn.request("POST", "/api/pull", json.dumps({"model": reg.model(), "insecure": True}))
    resp = conn.getresponse()
    while json.loads(resp.readline()).get("completed", 0) < MB:
        pass
    conn.sock.shutdown(socket.SHUT_RDWR)  # the client goes away, as a Ctrl+C'd `ollama pull` does
    resp.close()
    conn.close()
    part = tmp_path / "models" / "blobs" / f"sha256-{digest[7:]}-partial-0"
    recorded = wait_for(lambda: (part_file(part) or {}).get("Completed"), what="part progress recorded")
    assert part_file(part) == {"N": 0, "Offset": 0, "Size": 3 * MB, "Completed": recorded}
    assert MB <= recorded < 3 * MB
    time.sleep(0.2)  # the cancelled download leaves blobDownloadManager just after it records its parts
    reg.throttle(0)
    before = reg.blob_bytes()
    lines = ollama.pull(reg.model(), insecure=True)
    assert lines[-1] == {"status": "success"}
    progress = [line for line in lines if line.get("digest") == digest]
    assert not progress or progress[0].get("completed", 0) >= recorded  # it starts where it stopped
    small = sum(layer["size"] for layer in written["manifest"]["layers"][1:]) + written["manifest"]["config"]["size"]
    assert reg.blob_bytes() - before - small == 3 * MB - recorded


def test_a_pull_killed_midway_resumes_from_its_finished_parts(tmp_path, servers):
    """download.go: parts of 100 MB; a SIGKILLed server keeps the parts that finished (their -partial-N say so),
    loses those under way; the next server (its start-up prune spares partials younger than an hour) fetches only
    what is missing."""
    size = 104 * MB  # two parts: 100 MB and 4 MB, fetched at once
    written = registry.write_model(tmp_path / "registry", size=size)
    reg = servers(Registry, tmp_path / "registry", bytes_per_second=8 * MB)
    ollama = servers(Ollama, tmp_path / "first", models=tmp_path / "models")
    blob = tmp_path / "models" / "blobs" / f"sha256-{written['manifest']['layers'][0]['digest'][7:]}"
    conn = http.client.HTTPConnection("127.0.0.1", ollama.port, timeout=30)
    conn.request("POST", "/api/pull", json.dumps({"model": reg.model(), "insecure": True}))
    resp = conn.getresponse()

    def second_part_done() -> bool:
        resp.readline()  # a progress line every 60 ms
        return (part_file(Path(f"{blob}-partial-1")) or {}).get("Completed") == 4 * MB

    wait_for(second_part_done, timeout=20, what="the 4 MB part finished")
    stop(ollama.proc)  # SIGKILL while the 100 MB part is under way
    conn.close()
    assert part_file(Path(f"{blob}-partial-0")) == {"N": 0, "Offset": 0, "Size": 100 * MB, "Completed": 0}
    assert Path(f"{blob}-partial").stat().st_size == size
    reg.throttle(0)
    before = reg.blob_bytes()
    second = servers(Ollama, tmp_path / "second", models=tmp_path / "models")
    assert second.pull(reg.model(), insecure=True)[-1] == {"status": "success"}
    small = sum(layer["size"] for layer in written["manifest"]["layers"][1:]) + written["manifest"]["config"]["size"]
    assert reg.blob_bytes() - before - small == 100 * MB  # fewer than the blob's 104 MB: the 4 MB part was kept
    assert blob.stat().st_size == size
    assert not list(blob.parent.glob("*-partial*"))


def test_a_blob_that_does_not_match_its_digest_fails_the_pull(tmp_path, servers):
    """images.go verifyBlob: the blob is removed, no manifest is written, the error names both digests."""
    written = registry.write_model(tmp_path / "registry", size=MB, corrupt=True)
    reg = servers(Registry, tmp_path / "registry")
    ollama = servers(Ollama, tmp_path, models=tmp_path / "models")
    digest = written["manifest"]["layers"][0]["digest"]
    with open(tmp_path / "registry" / "blobs" / f"sha256-{digest[7:]}", "rb") as f:
        got = hashlib.sha256(f.read()).hexdigest()
    error = f"digest mismatch, file must be downloaded again: want {digest}, got sha256:{got}"
    lines = ollama.pull(reg.model(), insecure=True)
    assert lines[-2:] == [{"status": "verifying sha256 digest"}, {"error": error}]
    assert not (tmp_path / "models" / "blobs" / f"sha256-{digest[7:]}").exists()
    assert not list((tmp_path / "models").rglob("latest"))  # no manifest
    code, _, body = call(ollama.port, "POST", "/api/pull", {"model": reg.model(), "insecure": True, "stream": False})
    assert (code, json.loads(body)) == (500, {"error": error})


def test_a_registry_must_be_asked_insecurely_and_must_say_where_blobs_are(tmp_path, servers):
    """images.go: https unless "insecure"; download.go: the blob GET must answer a Location (registry:2 does not)."""
    registry.write_model(tmp_path / "registry", size=MB)
    reg = servers(Registry, tmp_path / "registry")
    ollama = servers(Ollama, tmp_path, models=tmp_path / "models")
    lines = ollama.pull(reg.model())
    assert lines == [{"status": "pulling manifest"}, {"error": (
        f'pull model manifest: Get "https://127.0.0.1:{reg.port}/v2/library/tiny/manifests/latest": '
        "http: server gave HTTP response to HTTPS client")}]  # fmt: skip
    direct = servers(Registry, tmp_path / "registry", direct_blobs=True)
    assert ollama.pull(direct.model(), insecure=True)[-1] == {"error": "http: no Location header in response"}
    nobody = f"127.0.0.1:{free_port()}"
    assert ollama.pull(f"{nobody}/library/tiny", insecure=True)[-1] == {"error": (
        f'pull model manifest: Get "http://{nobody}/v2/library/tiny/manifests/latest": dial tcp {nobody}: connect: '
        "connection refused")}  # fmt: skip


def _listening(port: int) -> list[str]:
    """Local addresses in LISTEN on this port, from /proc/net/tcp (IPv4)."""
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.append(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def test_ollama_host_binds_where_told(tmp_path, servers):
    """cmd.go RunServer: net.Listen on envconfig.Host(); a taken port ends it as cobra.CheckErr does."""
    port = free_port()
    first = servers(Ollama, tmp_path / "a", port=port, host=f"http://127.0.0.1:{port}")
    assert _listening(port) == ["127.0.0.1"]
    assert api(port, "GET", "/api/version") == (200, {"version": UPSTREAM_VERSION})
    assert f'msg="Listening on 127.0.0.1:{port} (version {UPSTREAM_VERSION})"' in first.out.read_text()
    taken = subprocess.run([str(STANDIN / "bin" / "ollama"), "serve"], env={**first.env, "HOME": str(tmp_path)},
                           capture_output=True, text=True, timeout=10)  # fmt: skip
    assert (taken.returncode, taken.stderr) == (
        1,
        f"Error: listen tcp 127.0.0.1:{port}: bind: address already in use\n",
    )


def _unzstd(data: bytes) -> bytes:
    """What install.sh runs (`zstd -d`); ground/install.sh installs zstd, so CI always has it."""
    zstd = shutil.which("zstd")
    if not zstd:
        if os.environ.get("CI"):
            pytest.fail("zstd is not installed: ground/install.sh installs it")
        pytest.skip("zstd is not installed (apt-get install zstd, or make ground-up)")
    return subprocess.run([zstd, "-d", "-c"], input=data, capture_output=True, check=True).stdout


def test_the_release_archive_installs_and_runs_as_upstream_s(tmp_path, servers):
    """release.yaml: ollama-linux-amd64.tar.zst with bin/ollama and lib/ollama/, owned by 0, and sha256sum.txt."""
    archive = release.build_release(tmp_path / "dist")
    assert archive == tmp_path / "dist" / "ollama-linux-amd64.tar.zst"
    sums = (tmp_path / "dist" / "sha256sum.txt").read_text()
    assert sums == f"{hashlib.sha256(archive.read_bytes()).hexdigest()}  ./ollama-linux-amd64.tar.zst\n"
    assert release.build_release(tmp_path / "again").read_bytes() == archive.read_bytes()  # reproducible
    install = tmp_path / "usr-local"
    (tarball := tmp_path / "ollama.tar").write_bytes(_unzstd(archive.read_bytes()))
    with tarfile.open(tarball) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert all(m.uid == 0 and m.gid == 0 for m in members.values())
        assert members["bin/ollama"].mode == 0o755 and "lib/ollama/ollama_standin/server.py" in members
        tar.extractall(install, filter="tar")
    binary = install / "bin" / "ollama"
    out = subprocess.run([str(binary), "--version"], env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                         "OLLAMA_HOST": f"127.0.0.1:{free_port()}"}, capture_output=True, text=True)  # fmt: skip
    assert out.stdout.endswith(f"Warning: client version is {UPSTREAM_VERSION}\n")
    ollama = servers(Ollama, tmp_path / "run", binary=binary)
    assert api(ollama.port, "GET", "/api/version") == (200, {"version": UPSTREAM_VERSION})
    out = subprocess.run([str(binary), "-v"], env=ollama.env, capture_output=True, text=True, check=True)
    assert out.stdout == f"ollama version is {UPSTREAM_VERSION}\n"
