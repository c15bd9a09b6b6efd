"""The SwarmUI stand-in answers as upstream SwarmUI 062407c7 does, and self-starts real ComfyUI processes.

It runs here on loopback as the target hosts run it: launch-linux.sh from a git checkout of what
publish-standin.sh publishes, the stand-in dotnet in $HOME/.dotnet, Data/Settings.fds and
Data/Backends.fds. ComfyUI is the stand-in's (src/standin/comfyui.py as dlbackend/ComfyUI/main.py)
in a venv of this machine's python (made without pip: fast, and enough for it), holding by default the
dist-info folders DoLibFixes installs at a first start (comfy_install's libs). Each test names the
upstream behaviour it pins; a stand-in that drifts from it fails here.

It stays one file past 500 lines: every test starts the same checkout, dotnet and ComfyUI venv through
the fixtures at its top, made once per module; split, each file would make them again.
"""

import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "ground" / "swarmui-standin"
BACKENDS = """0:
    type: comfyui_selfstart
    title: ComfyUI
    enabled: true
    settings:
        StartScript: dlbackend/ComfyUI/main.py
        GPU_ID: 0
"""
UPSTREAM_VERSION = "0.9.8.2"  # src/SwarmUI.csproj <Version> at 062407c7
# ComfyUISelfStartBackend.DoLibFixes' pip calls on a venv with nothing installed (requirements.txt empty,
# FrontendVersion LatestSwarmValidated), each as its "Self-Start ComfyUI (<reason>) exited properly." line
# names it: RequiredPythonPackages, numpy, RequiredVersionPythonPackages (read from the lib folder as it was
# at the start: spandrel and av again), then the validated frontend once more.
FIRST_START_PIP_CALLS = [
    *(f"Installing '{n}'" for n in ("kornia", "sentencepiece", "spandrel", "pydantic", "pydantic-settings",
                                    "comfyui_frontend_package==1.47.12", "alembic", "simpleeval", "blake3",
                                    "filelock", "comfy-angle", "rembg", "onnxruntime", "matplotlib",
                                    "opencv-python-headless", "imageio-ffmpeg", "dill", "omegaconf")),
    "Updating 'numpy'",
    *(f"Updating '{n}'" for n in ("diffusers", "aiohttp", "yarl", "av", "spandrel", "transformers", "pyopengl", "av",
                                  "ultralytics", "pip")),
    "Updating 'comfyui_frontend_package'",
]  # fmt: skip
# what they leave in site-packages: a version pinned (== / >=) is that version, a bare name the pip stand-in's
BARE_VERSION = "0.0.0+standin"
INSTALLED_LIBS = sorted(
    f"{name}-{version}.dist-info" for name, version in [
        *((n, BARE_VERSION) for n in ("kornia", "sentencepiece", "pydantic", "pydantic_settings", "alembic",
                                      "simpleeval", "blake3", "filelock", "comfy_angle", "rembg", "onnxruntime",
                                      "matplotlib", "opencv_python_headless", "imageio_ffmpeg", "dill", "omegaconf")),
        ("comfyui_frontend_package", "1.47.12"), ("numpy", "1.26.4"), ("diffusers", "0.36.0"), ("aiohttp", "3.11.8"),
        ("yarl", "1.18.0"), ("av", "18.1.0"), ("spandrel", "0.4.1"), ("transformers", "4.57.3"),
        ("pyopengl", "3.1.8"), ("ultralytics", "8.3.197"), ("pip", "25.0"),
    ]
)  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_block(count: int = 8) -> int:
    """The first of `count` consecutive ports nobody holds, below the kernel's ephemeral range.

    ComfyUI's relaunches take the next ports (GetNextPort); an ephemeral port beside a free_port()
    may meanwhile carry one of this machine's own outbound connections (CI starts the ground's
    services beside the unit tests), and a ComfyUI that cannot bind its port dies at launch."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, low - count)
        try:
            with contextlib.ExitStack() as held:
                for port in range(base, base + count):
                    s = held.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {count} consecutive free ports between 20000 and {low}")


def port_listened(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Swarm:
    def __init__(self, root: Path, port: int, comfy_port: int):
        self.root, self.port, self.comfy_port = root, port, comfy_port
        self.session = None

    def call(self, route: str, body: dict | None = None, content_type: str = "application/json") -> tuple[int, dict]:
        """HTTP code and JSON body, errors included (upstream answers 4xx with a JSON body)."""
        if body is None:
            body = {"session_id": self.session}
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{route}", json.dumps(body).encode(), {"Content-Type": content_type}
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def post(self, route: str, body: dict | None = None) -> dict:
        code, answer = self.call(route, body)
        assert code == 200, (code, answer)
        return answer

    def status(self) -> str:
        return self.post("/API/GetGlobalStatus")["backend_status"]["status"]

    def backends(self) -> dict:
        return self.post("/API/ListBackends")


def comfy_install(root: Path, venv: str = "venv", libs: list[str] = INSTALLED_LIBS) -> None:
    """What launchtools/comfy-install-linux.sh leaves, quickly: ComfyUI's main.py and a venv (no pip).
    venv "dangling-venv": its python3 a link to an interpreter that is gone (a boot disk replaced).
    libs: the dist-info folders put in the venv's site-packages, by default all an earlier start's
    DoLibFixes installed (so that start installs nothing); [] for a venv as the installer leaves it."""
    comfy = root / "dlbackend" / "ComfyUI"
    comfy.mkdir(parents=True)
    shutil.copy2(STANDIN / "src" / "standin" / "comfyui.py", comfy / "main.py")
    (comfy / "requirements.txt").write_text("")
    if venv == "venv":
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(comfy / "venv")], check=True)
        for name in libs:
            (site_packages(root) / name).mkdir()
    elif venv == "dangling-venv":
        (comfy / "venv/bin").mkdir(parents=True)
        (comfy / "venv/bin/python3").symlink_to("/nonexistent/python3.11")


def site_packages(root: Path) -> Path:
    return next((root / "dlbackend/ComfyUI/venv/lib").glob("python*/site-packages"))


def checkout(root: Path) -> None:
    """The files publish-standin.sh publishes (tracked, or untracked and not ignored), committed."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard", "--", str(STANDIN)],
                            cwd=REPO, check=True, capture_output=True, text=True).stdout  # fmt: skip
    for name in filter(None, listed.split("\0")):
        src = REPO / name
        if src.is_file():
            dest = root / src.relative_to(STANDIN)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    env = dict(
        os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t"
    )
    for args in (["init", "-q", "-b", "master"], ["add", "-f", "-A", "."], ["commit", "-q", "-m", "stand-in"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


def start(
    root: Path,
    *,
    backends: str | None = BACKENDS,
    comfy: str | None = "venv",
    extra=(),
    settings: str | None = None,
    libs: list[str] = INSTALLED_LIBS,
    pip_seconds: float = 0,
) -> tuple[Swarm, subprocess.Popen]:
    """A checkout started with launch-linux.sh; comfy, libs: see comfy_install (comfy None: no ComfyUI
    at all); pip_seconds: each pip call of DoLibFixes (STANDIN_PIP_INSTALL_SECONDS).
    ComfyUI's first port is a free one (the port counter starts just below it) unless `settings`
    gives the Network section."""
    checkout(root)
    home = root.parent / f"{root.name}-home"
    home.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "STANDIN_BACKEND_START_SECONDS": "0.5",
           "STANDIN_CRITICAL_PAUSE": "0", "STANDIN_PIP_INSTALL_SECONDS": str(pip_seconds)}  # fmt: skip
    if (root / "launchtools/linux-dotnet-install.sh").is_file():
        subprocess.run(["bash", "launchtools/linux-dotnet-install.sh", str(home / ".dotnet")], cwd=root, env=env,
                       check=True, capture_output=True)  # fmt: skip
    if comfy:
        comfy_install(root, comfy, libs)
    port, comfy_port = free_port(), free_port_block() + 1  # +1: the counter starts below it
    (root / "Data").mkdir()
    if settings is None:
        settings = f"Network:\n    BackendStartingPort: {comfy_port - 1}\n"
    (root / "Data/Settings.fds").write_text("IsInstalled: true\nLaunchMode: none\n" + settings)
    if backends is not None:
        (root / "Data/Backends.fds").write_text(backends)
    output = root.parent / f"{root.name}.out"  # a file, not a pipe nobody drains: a full pipe would stall the server
    with output.open("wb") as sink:
        proc = subprocess.Popen(
            ["./launch-linux.sh", *extra, "--launch_mode", "none", "--host", "127.0.0.1", "--port", str(port)],
            cwd=root, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    swarm = Swarm(root, port, comfy_port)
    deadline = time.monotonic() + 30
    while True:
        try:
            swarm.session = swarm.post("/API/GetNewSession", {})["session_id"]
            return swarm, proc
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                stop(proc)
                raise AssertionError(output.read_text(errors="replace")[-3000:]) from None
            time.sleep(0.1)
        except BaseException:  # any other failure of the start leaves no server (nor its ComfyUIs) behind
            stop(proc)
            raise


def stop(proc: subprocess.Popen) -> None:
    """The launcher, the server it runs and the ComfyUI processes the server started: one process group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def comfy_processes(root: Path) -> list[dict]:
    """The live ComfyUI processes of this checkout, as the idle-killer finds them on a VM: from /proc
    (cwd dlbackend/ComfyUI, `main.py` and its --port on the command line), with their environment."""
    cwd = str((root / "dlbackend" / "ComfyUI").resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "cwd") != cwd:
                continue
            argv = (entry / "cmdline").read_bytes().decode().split("\0")[:-1]
            environ = dict(v.split("=", 1) for v in (entry / "environ").read_bytes().decode().split("\0") if "=" in v)
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if "main.py" in argv and state != "Z":
            found.append({"pid": int(entry.name), "argv": argv, "port": int(argv[argv.index("--port") + 1]),
                          "env": environ})  # fmt: skip
    return sorted(found, key=lambda p: p["port"])


@pytest.fixture
def swarm(tmp_path):
    swarm, proc = start(tmp_path / "SwarmUI")
    yield swarm
    stop(proc)


def wait_for(check, timeout=20, seen=lambda: ""):
    """`seen` tells what was there instead when the condition is not met in time."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"condition not met in time {seen()}"
        time.sleep(0.1)
    return value


def running_on(swarm: Swarm, port: int, timeout: float = 45) -> dict:
    """Waits until the only ComfyUI of the checkout listens on `port` and SwarmUI calls it running
    (a shutdown may take Utilities.KillProcess's two 10 s graces)."""

    def check():
        procs = comfy_processes(swarm.root)
        ok = [p["port"] for p in procs] == [port] and swarm.backends()["0"]["status"] == "running"
        return ok and procs[0]

    def seen() -> str:
        ports = [p["port"] for p in comfy_processes(swarm.root)]
        output = (swarm.root.parent / f"{swarm.root.name}.out").read_text(errors="replace")[-2500:]
        return f"(ComfyUI ports {ports}, backend {swarm.backends()['0']['status']}):\n{output}"

    return wait_for(check, timeout, seen)


# --- src/WebAPI/BasicAPIFeatures.cs GetNewSession; src/Accounts/SessionHandler.cs --------------------


def test_new_session_has_upstreams_fields_and_version(swarm):
    reply = swarm.post("/API/GetNewSession", {})
    assert list(reply) == ["session_id", "user_id", "output_append_user", "version", "server_id", "permissions"]
    assert reply["version"] == UPSTREAM_VERSION and reply["user_id"] == "local" and "*" in reply["permissions"]
    assert len(reply["session_id"]) == 40 and set(reply["session_id"]) <= set("0123456789abcdef")


def test_sessions_survive_a_restart_in_data_users_ldb(swarm):
    old_server = swarm.post("/API/GetNewSession", {})["server_id"]
    swarm.post("/StandinTest/Restart")  # exit 42: launch-linux.sh starts a new server process
    wait_for(lambda: _server_id(swarm) not in (None, old_server))
    code, answer = swarm.call("/API/GetGlobalStatus")  # the session from before the restart
    assert code == 200 and "status" in answer, answer
    assert swarm.session in (swarm.root / "Data/Users.ldb").read_text()


# --- src/WebAPI/API.cs HandleAsyncRequest -------------------------------------------------------------


def test_api_errors_carry_upstreams_http_codes_and_the_session_is_checked_before_the_route(swarm):
    invalid = {"error": "Invalid session ID. You may need to refresh the page.", "error_id": "invalid_session_id"}
    missing = {"error_id": "basic_api", "error": "missing session id"}
    bad_route = {"error_id": "bad_route", "error": "Unknown API route"}
    assert swarm.call("/API/GetGlobalStatus", {"session_id": "nope"}) == (401, invalid)
    assert swarm.call("/API/GetGlobalStatus", {}) == (400, missing)
    assert swarm.call("/API/NoSuchRoute") == (400, bad_route)
    assert swarm.call("/API/NoSuchRoute", {"session_id": "nope"}) == (401, invalid)  # session first
    assert swarm.call("/API/NoSuchRoute", {}) == (400, missing)
    assert swarm.call("/API/getglobalstatus")[0] == 200  # routes are matched lower-cased
    wrong_type = {"error_id": "basic_api", "error": "Wrong content type"}
    assert swarm.call("/API/GetNewSession", {}, "text/plain") == (400, wrong_type)
    hooks = ("/StandinTest/QueueGeneration", "/StandinTest/ComfyQueue")
    assert [swarm.call(r, {"session_id": "nope"})[0] for r in hooks] == [401, 401]  # a session, as the API


# --- src/WebAPI/AdminAPI.cs GetGlobalStatus, BasicAPIFeatures.cs GetCurrentStatus -------------------------


def test_global_status_shape_and_backend_loading_then_running(swarm):
    first = swarm.post("/API/GetGlobalStatus")
    assert list(first) == ["status", "backend_status", "supported_features"]
    assert list(first["status"]) == ["waiting_gens", "loading_models", "waiting_backends", "live_gens"]
    assert list(first["backend_status"]) == ["status", "class", "message", "any_loading"]
    assert first["backend_status"]["status"] == "loading" and first["backend_status"]["any_loading"] is True
    wait_for(lambda: swarm.status() == "running")
    running = {"status": "running", "class": "", "message": "", "any_loading": False}
    assert swarm.post("/API/GetGlobalStatus")["backend_status"] == running


def test_queued_generations_count_across_sessions_but_not_in_another_sessions_current_status(swarm):
    wait_for(lambda: swarm.status() == "running")
    other = swarm.post("/API/GetNewSession", {})["session_id"]
    swarm.post("/StandinTest/QueueGeneration", {"session_id": other, "seconds": 1.5, "count": 2})
    status = swarm.post("/API/GetGlobalStatus")["status"]
    assert status["live_gens"] == 1 and status["waiting_gens"] == 1
    assert swarm.post("/API/GetCurrentStatus")["status"]["live_gens"] == 0  # per-session, the research's trap
    wait_for(lambda: swarm.post("/API/GetGlobalStatus")["status"]["live_gens"] == 0, timeout=10)
    assert list((swarm.root / "Output/local/raw").glob("*/*.png"))


def test_model_download_writes_a_download_tmp_then_renames_it(swarm):
    swarm.post("/StandinTest/DownloadModel", {"session_id": swarm.session, "name": "x", "seconds": 1, "bytes": 4096})
    models = swarm.root / "Models/Stable-Diffusion"
    wait_for(lambda: (models / "x.download.tmp").exists(), timeout=5)
    wait_for(lambda: (models / "x.safetensors").exists(), timeout=10)
    assert not (models / "x.download.tmp").exists()


# --- src/WebAPI/BackendAPI.cs ListBackends / BackendToNet ------------------------------------------------


def test_list_backends_is_an_object_keyed_by_id_in_backend_to_net_shape(swarm):
    wait_for(lambda: swarm.status() == "running")
    backends = swarm.post("/API/ListBackends", {"session_id": swarm.session, "nonreal": False, "full_data": True})
    assert list(backends) == ["0"]
    b = backends["0"]
    assert list(b) == ["type", "status", "id", "settings", "modcount", "features", "enabled", "title", "max_usages",
                       "seconds_since_used", "time_since_used", "can_load_models", "current_model"]  # fmt: skip
    assert (b["type"], b["status"], b["id"], b["title"], b["enabled"]) == ("comfyui_selfstart", "running", 0,
                                                                         "ComfyUI", True)  # fmt: skip
    assert b["time_since_used"] == "Never" and b["seconds_since_used"] == 0
    assert b["max_usages"] == 2  # 1 + OverQueue, set by InitInternal
    # ComfyUISelfStartSettings, every field, typed, the file's values over the defaults
    assert b["settings"] == {"StartScript": "dlbackend/ComfyUI/main.py", "ExtraArgs": "", "DisableInternalArgs": False,
                             "AutoUpdate": "false", "UpdateManagedNodes": "false",
                             "FrontendVersion": "LatestSwarmValidated", "EnablePreviews": "true", "GPU_ID": "0",
                             "OverQueue": 1, "AutoRestart": True}  # fmt: skip
    assert "current_model" not in swarm.backends()["0"]  # only with full_data


# --- src/Backends/BackendHandler.cs CurrentBackendStatus, LoadBackendDirect -------------------------------


def test_no_backends_is_empty_and_a_missing_comfy_install_is_errored(tmp_path):
    swarm, proc = start(tmp_path / "a", backends=None)
    try:
        assert swarm.status() == "empty"
    finally:
        stop(proc)
    swarm, proc = start(tmp_path / "b", comfy=None)  # no main.py: IsValidStartPath refuses it
    try:
        wait_for(lambda: swarm.status() == "errored", timeout=10)
    finally:
        stop(proc)


def test_disabled_backends_are_all_disabled_and_start_no_comfyui(tmp_path):
    swarm, proc = start(tmp_path / "s", backends=BACKENDS.replace("enabled: true", "enabled: false"))
    try:
        wait_for(lambda: swarm.backends()["0"]["status"] == "disabled")
        assert swarm.status() == "all_disabled" and comfy_processes(swarm.root) == []
    finally:
        stop(proc)


def test_a_venv_whose_python_is_gone_is_errored_after_upstreams_retries(tmp_path):
    """ConfigurePythonExeFor picks venv/bin/python3 (a dangling link counts, as for .NET's File.Exists);
    Process.Start then throws: LoadBackendDirect retries 3 times (MaxBackendInitAttempts), then ERRORED."""
    swarm, proc = start(tmp_path / "s", comfy="dangling-venv")
    try:
        statuses = []
        wait_for(lambda: statuses.append(s := swarm.backends()["0"]["status"]) or s == "errored", timeout=30)
        assert "waiting" in statuses and comfy_processes(swarm.root) == []
    finally:
        stop(proc)


def test_an_errored_second_backend_makes_the_aggregate_errored_while_ours_runs(tmp_path):
    dead = free_port()  # nothing listens there
    backends = (
        BACKENDS
        + f"""1:
    type: comfyui_api
    title: Remote
    enabled: true
    settings:
        Address: http://127.0.0.1:{dead}
"""
    )
    swarm, proc = start(tmp_path / "s", backends=backends)
    try:
        wait_for(lambda: [b["status"] for b in swarm.backends().values()] == ["running", "errored"], timeout=40)
        assert swarm.post("/API/GetGlobalStatus")["backend_status"] == {
            "status": "errored", "class": "error", "any_loading": False,
            "message": "Some backends have errored on the server. Check the server logs for details.",
        }  # fmt: skip
        assert list(swarm.backends()["1"]["settings"]) == ["Address", "AllowIdle", "OverQueue", "EnableFrontendDev"]
        assert swarm.post("/StandinTest/ComfyQueue", {"session_id": swarm.session, "count": 2, "seconds": 5})["success"]
        assert _comfy_get(swarm.comfy_port, "/prompt") == {"exec_info": {"queue_remaining": 2}}
    finally:
        stop(proc)


# --- src/Backends/NetworkBackendUtils.cs GetNextPort / DoSelfStart; ComfyUISelfStartBackend.cs ------------


def test_first_comfyui_listens_on_7821_and_every_relaunch_takes_the_next_port(tmp_path):
    """BackendStartingPort 7820, incremented before use: 7821; a ComfyUI that dies is relaunched
    (AutoRestart) on 7822, 7823, 7824."""
    if any(port_listened(p) for p in range(7820, 7826)):
        pytest.skip("something else listens on 7820-7825 here")
    swarm, proc = start(tmp_path / "s", settings="")
    try:
        first = running_on(swarm, 7821)
        # the arguments upstream passes (ExtraArgs, --port, then the internal ones) and the GPU by env
        data = str(swarm.root.resolve() / "Data" / "comfy-auto-model.yaml")
        assert first["argv"] == [str(swarm.root.resolve() / "dlbackend/ComfyUI/venv/bin/python3"), "-s", "main.py",
                                 "--port", "7821", "--extra-model-paths-config", data, "--preview-method", "latent2rgb",
                                 "--front-end-version", "Comfy-Org/ComfyUI_frontend@v1.47.12"]  # fmt: skip
        assert first["env"]["CUDA_VISIBLE_DEVICES"] == "0" and first["env"]["ROCR_VISIBLE_DEVICES"] == "0"
        for port in (7822, 7823, 7824):
            pid = comfy_processes(swarm.root)[0]["pid"]
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: swarm.backends()["0"]["status"] == "errored")  # until the relaunch 2 s later
            running_on(swarm, port)
        assert not port_listened(7821)
    finally:
        stop(proc)


def test_restart_backends_relaunches_comfyui_on_the_next_port(swarm):
    running_on(swarm, swarm.comfy_port)
    old = comfy_processes(swarm.root)[0]["pid"]
    assert swarm.post("/API/RestartBackends", {"session_id": swarm.session}) == {"result": "Success.", "count": 1}
    running_on(swarm, swarm.comfy_port + 1)
    assert not Path(f"/proc/{old}").exists() or old not in [p["pid"] for p in comfy_processes(swarm.root)]


def test_each_selfstart_backend_runs_its_own_comfyui_on_its_gpu(tmp_path):
    second = BACKENDS.replace("0:", "1:").replace("GPU_ID: 0", "GPU_ID: 1").replace("title: ComfyUI", "title: GPU 1")
    backends = BACKENDS + second
    swarm, proc = start(tmp_path / "s", backends=backends)
    try:
        # 60 s: two ComfyUI stand-ins start side by side while CI's ground tests load both cores
        wait_for(lambda: [b["status"] for b in swarm.backends().values()] == ["running", "running"], 60,
                 seen=lambda: swarm.backends())  # fmt: skip
        procs = comfy_processes(swarm.root)
        assert [(p["port"], p["env"]["CUDA_VISIBLE_DEVICES"]) for p in procs] == [
            (swarm.comfy_port, "0"), (swarm.comfy_port + 1, "1")]  # fmt: skip
    finally:
        stop(proc)


def test_a_comfyui_that_fails_at_its_first_launch_is_errored_and_not_relaunched(tmp_path):
    """DoSelfStart: "AutoRestart ignored as this was an initial launch failure" (ComfyUI refuses an
    unknown argument, as comfy/cli_args.py does)."""
    swarm, proc = start(tmp_path / "s", backends=BACKENDS + "        ExtraArgs: --no-such-flag\n")
    try:
        wait_for(lambda: swarm.backends()["0"]["status"] == "errored")
        time.sleep(3)  # a relaunch would come 2 s later
        assert swarm.backends()["0"]["status"] == "errored" and comfy_processes(swarm.root) == []
        assert not port_listened(swarm.comfy_port + 1)
    finally:
        stop(proc)


def test_comfyui_processes_end_with_the_server(tmp_path):
    swarm, proc = start(tmp_path / "s", extra=["--forward_restart"])
    try:
        running_on(swarm, swarm.comfy_port)
        pid = comfy_processes(swarm.root)[0]["pid"]
        swarm.post("/StandinTest/Restart")
        assert proc.wait(timeout=30) == 42  # --forward_restart: launch-linux.sh passes 42 on
        assert comfy_processes(swarm.root) == [] and not port_listened(swarm.comfy_port), pid
    finally:
        stop(proc)
    swarm, proc = start(tmp_path / "t")
    try:
        running_on(swarm, swarm.comfy_port)
        server = [p for p in _children(proc.pid) if b"server.py" in Path(f"/proc/{p}/cmdline").read_bytes()]
        os.kill(server[0], signal.SIGTERM)  # systemd's stop
        wait_for(lambda: comfy_processes(swarm.root) == [])
    finally:
        stop(proc)


# --- the ComfyUI stand-in: ComfyUI's server.py GET /queue, GET /prompt ------------------------------------


# --- ComfyUISelfStartBackend.cs Init -> DoLibFixes / DoPythonCall; NetworkBackendUtils.GetProbableLibFolderFor ---


def pip_children(proc: subprocess.Popen) -> list[dict]:
    """The pip processes under the launcher, as the idle-killer's /proc walk sees them."""
    found = []
    for pid in _children(proc.pid):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            parent_argv = Path(f"/proc/{parent}/cmdline").read_bytes().decode().split("\0")
            if argv[1:4] == ["-s", "-m", "pip"]:
                found.append({"argv": argv, "cwd": os.readlink(f"/proc/{pid}/cwd"), "parent": parent_argv})
    return found


def pip_calls(swarm: Swarm) -> list[str]:
    """The reasons of the pip calls that ended, from their Info lines (ReportLogsFromProcess)."""
    output = (swarm.root.parent / f"{swarm.root.name}.out").read_text(errors="replace")
    return re.findall(r"\[Info\] Self-Start ComfyUI \((.+)\) exited properly\.$", output, re.MULTILINE)


def test_a_missing_package_is_pip_installed_by_swarmui_while_the_backend_waits_then_comfyui_starts(tmp_path):
    """DoLibFixes runs before DoSelfStart: the backend is still WAITING (DoInitBackend's; LOADING comes
    with the launch), the aggregate says loading; the package whose folder the lib folder lacks is
    installed by `<venv>/bin/python3 -s -m pip install <pipName>`, a child of SwarmUI in ComfyUI's folder;
    ComfyUI is launched only once it ended. A restart finds the package there and installs nothing."""
    missing = "kornia-0.0.0+standin.dist-info"
    swarm, proc = start(tmp_path / "s", libs=[n for n in INSTALLED_LIBS if n != missing], pip_seconds=2)
    try:
        pip = wait_for(lambda: pip_children(proc), timeout=10)
        comfy = swarm.root.resolve() / "dlbackend/ComfyUI"
        assert pip == [{"argv": [str(comfy / "venv/bin/python3"), "-s", "-m", "pip", "install", "kornia"],
                        "cwd": str(comfy), "parent": pip[0]["parent"]}]  # fmt: skip
        assert any(a.endswith("src/standin/server.py") for a in pip[0]["parent"]), pip[0]["parent"]
        assert swarm.backends()["0"]["status"] == "waiting"
        assert swarm.post("/API/GetGlobalStatus")["backend_status"]["status"] == "loading"
        assert comfy_processes(swarm.root) == []
        running_on(swarm, swarm.comfy_port)
        assert missing in os.listdir(site_packages(swarm.root)) and pip_calls(swarm) == ["Installing 'kornia'"]
        old_server = _server_id(swarm)
        swarm.post("/StandinTest/Restart")
        wait_for(lambda: _server_id(swarm) not in (None, old_server))
        running_on(swarm, swarm.comfy_port)  # a new server: its port counter starts again
        assert pip_calls(swarm) == ["Installing 'kornia'"]
    finally:
        stop(proc)


def test_a_first_start_installs_upstreams_required_packages_and_a_second_start_none(tmp_path):
    """RequiredPythonPackages, numpy, RequiredVersionPythonPackages and the validated frontend, in
    DoLibFixes' order; versions are read from the dist-info folders as found at the start."""
    swarm, proc = start(tmp_path / "s", libs=[])
    try:
        running_on(swarm, swarm.comfy_port)
        assert sorted(pip_calls(swarm)) == sorted(FIRST_START_PIP_CALLS)
        assert sorted(os.listdir(site_packages(swarm.root))) == INSTALLED_LIBS
        output = (swarm.root.parent / f"{swarm.root.name}.out").read_text(errors="replace")
        assert "appears to not contain pip" in output  # a venv made --without-pip
        old_server = _server_id(swarm)
        swarm.post("/StandinTest/Restart")
        wait_for(lambda: _server_id(swarm) not in (None, old_server))
        running_on(swarm, swarm.comfy_port)
        assert sorted(pip_calls(swarm)) == sorted(FIRST_START_PIP_CALLS)  # none more
    finally:
        stop(proc)


def test_comfyui_queue_and_prompt_shapes_and_the_swarmui_hook_that_fills_them(swarm):
    running_on(swarm, swarm.comfy_port)
    assert _comfy_get(swarm.comfy_port, "/queue") == {"queue_running": [], "queue_pending": []}
    sent = swarm.post("/StandinTest/ComfyQueue", {"session_id": swarm.session, "count": 3, "seconds": 5})
    assert sent.get("success") is True, sent
    # ComfyUI's prompt worker takes the first one from pending in a thread of its own (main.py prompt_worker):
    # for a moment after the POST all three wait, longer on a loaded machine
    queue = wait_for(
        lambda: (q := _comfy_get(swarm.comfy_port, "/queue"))["queue_running"] and q,
        seen=lambda: _comfy_get(swarm.comfy_port, "/queue"),
    )
    assert len(queue["queue_running"]) == 1 and len(queue["queue_pending"]) == 2
    assert [len(item) for item in queue["queue_running"] + queue["queue_pending"]] == [5, 5, 5]
    assert _comfy_get(swarm.comfy_port, "/prompt") == {"exec_info": {"queue_remaining": 3}}
    assert _comfy_get(swarm.comfy_port, "/api/prompt") == {"exec_info": {"queue_remaining": 3}}
    assert swarm.post("/API/GetGlobalStatus")["status"]["live_gens"] == 0  # SwarmUI does not see them


def test_forward_restart_exits_42(tmp_path):
    swarm, proc = start(tmp_path / "f", extra=["--forward_restart"])
    try:
        swarm.post("/StandinTest/Restart")
        assert proc.wait(timeout=30) == 42
    finally:
        stop(proc)


def test_a_websocket_route_upgrades_and_echoes_text_binary_and_ping(swarm):
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{swarm.port}/StandinTest/EchoWS", open_timeout=5) as ws:
        ws.send("привет")
        assert ws.recv(timeout=5) == "привет"
        ws.send(bytes(range(256)) * 300)  # a 16-bit-length frame is too short for this: 64-bit length
        assert ws.recv(timeout=5) == bytes(range(256)) * 300
        ws.ping().wait(5)


def _server_id(swarm):
    try:
        return swarm.post("/API/GetNewSession", {})["server_id"]
    except OSError:
        return None


def _comfy_get(port: int, route: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{route}", timeout=5) as reply:
        return json.loads(reply.read())


def _children(pid: int) -> list[int]:
    """Every descendant of pid."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out += [int(entry.name), *_children(int(entry.name))]
    return out
