"""Backends as upstream SwarmUI 062407c7 runs them.

- src/Backends/BackendHandler.cs: Data/Backends.fds is read at start (LoadInternal; a type it does
  not know is skipped); each backend goes WAITING (DoInitBackend), then is initialized
  (LoadBackendDirect): types that "load fast" (comfyui_api) at once on their own thread, the others
  (comfyui_selfstart) one after another on the init monitor thread; an init that throws is retried
  MaxBackendInitAttempts (3) times, a second apart, then the backend is ERRORED. CurrentBackendStatus
  is the aggregate, cached for 1 s.
- src/BuiltinExtensions/ComfyUIBackend/ComfyUIAPIAbstractBackend.cs InitInternal: a ComfyUI is
  RUNNING once GET /object_info answers; ComfyUIAPIBackend.cs: comfyui_api at its Address;
  ComfyUISelfStartBackend.cs: comfyui_selfstart's settings, its launch arguments, Shutdown.
- src/Backends/NetworkBackendUtils.cs: GetNextPort, ConfigurePythonExeFor, DoSelfStart (the launch,
  the loading loop, AutoRestart), ReportLogsFromProcess (a ComfyUI that ends is ERRORED, then
  relaunched on the next port when it had loaded and AutoRestart is on).
- src/WebAPI/BackendAPI.cs BackendToNet: the shape ListBackends answers.
Not imitated: DoLibFixes' pip installs (they need the network), git auto-updates, the node repos.

One file of ~630 lines on purpose: as upstream's BackendHandler and NetworkBackendUtils do, the
handler, the backend types and the self-start launch call into each other; read apart, the order of a
backend's states would be lost.
"""

import http.client
import json
import os
import shlex
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from fds import parse_fds

# BackendHandler / extension registrations: id -> CanLoadFast
BACKEND_TYPES = {
    "swarmswarmbackend": True, "autoscalingbackend": True, "localllama": True, "simpleremotellm": True,
    "auto_webui_api": True, "auto_webui_selfstart": False, "comfyui_api": True, "comfyui_selfstart": False,
}  # fmt: skip
MAX_BACKEND_INIT_ATTEMPTS = 3  # Settings.cs Backends.MaxBackendInitAttempts
# ComfyUISelfStartSettings / ComfyUIAPISettings, in declaration order, with their defaults and types
SETTINGS = {
    "comfyui_selfstart": {
        "StartScript": "", "ExtraArgs": "", "DisableInternalArgs": False, "AutoUpdate": "false",
        "UpdateManagedNodes": "false", "FrontendVersion": "LatestSwarmValidated", "EnablePreviews": "true",
        "GPU_ID": "0", "OverQueue": 1, "AutoRestart": True,
    },
    "comfyui_api": {"Address": "", "AllowIdle": False, "OverQueue": 1, "EnableFrontendDev": False},
}  # fmt: skip
SWARM_VALIDATED_FRONTEND_VERSION = "1.47.12"  # ComfyUISelfStartBackend.SwarmValidatedFrontendVersion
# ComfyUIBackendExtension.FeaturesSupported (before the loaded nodes add theirs) + ModelFolderFormat's
COMFY_FEATURES = ["comfyui", "refiners", "controlnet", "endstepsearly", "seamless", "video", "variation_seed",
                  "freeu", "yolov8", "folderslash"]  # fmt: skip


class InitFailed(Exception):
    """An exception out of a backend's Init: LoadBackendDirect retries, then gives up."""


def _typed(default, raw):
    if isinstance(default, bool):
        return str(raw).strip().lower() == "true"
    if isinstance(default, int):
        try:
            return int(str(raw).strip())
        except ValueError:
            return default
    return str(raw)


def port_taken(port: int) -> bool:
    """Utilities.IsPortTaken: any active TCP listener on that port (here: /proc/net/tcp{,6} LISTEN)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


class Ports:
    """NetworkBackendUtils.NextPort / GetNextPort: incremented BEFORE use, taken ports skipped.

    Program.cs sets the start to Network.BackendStartingPort (7820), plus a random 0-1999 when
    Network.BackendPortRandomize is on: so the first self-started ComfyUI listens on 7821."""

    def __init__(self, start: int):
        self.next_port = start
        self.lock = threading.Lock()

    def get_next_port(self) -> int:
        with self.lock:
            self.next_port += 1
            while port_taken(self.next_port):
                self.next_port += 1
            return self.next_port


class Backend:
    """BackendHandler.BackendData with its AbstractBackend."""

    def __init__(self, handler, backend_id: int, kind: str, title: str, enabled: bool, settings: dict):
        self.handler, self.id, self.type, self.title, self.enabled = handler, backend_id, kind, title, enabled
        defaults = SETTINGS.get(kind, {})
        self.settings = {k: _typed(v, settings[k]) if k in settings else v for k, v in defaults.items()}
        self.settings |= {k: v for k, v in settings.items() if k not in defaults and not isinstance(v, dict)}
        self.status = "waiting"  # AbstractBackend.Status starts WAITING
        self.init_attempts = 0
        self.mod_count = 0
        self.max_usages = 1
        self.time_last_release = 0.0  # monotonic; 0 = never released
        self.on_shutdown: list = []
        self.lock = threading.Lock()

    @property
    def features(self) -> list[str]:
        return list(COMFY_FEATURES) if self.type.startswith("comfyui") else []

    def init(self) -> None:
        raise InitFailed(f"the stand-in does not implement backends of type {self.type}")

    def shutdown(self) -> None:
        self.status = "disabled"

    def do_shutdown_now(self) -> None:
        """AbstractBackend.DoShutdownNow: the OnShutdown actions (a self-start's "exit expected"), then Shutdown."""
        actions, self.on_shutdown = self.on_shutdown, []
        for action in actions:
            action()
        self.shutdown()

    def to_net(self, full: bool = False) -> dict:
        """BackendAPI.BackendToNet."""
        last = self.time_last_release
        since = 0 if last == 0 else int(time.monotonic() - last)
        data = {
            "type": self.type,
            "status": self.status,
            "id": self.id,
            "settings": dict(self.settings),
            "modcount": self.mod_count,
            "features": self.features,
            "enabled": self.enabled,
            "title": self.title,
            "max_usages": self.max_usages,
            "seconds_since_used": since,
            "time_since_used": "Never" if last == 0 else f"{since} seconds ago",
            "can_load_models": True,
        }
        if full:
            data["current_model"] = None
        return data


class ComfyUIAPIBackend(Backend):
    """ComfyUIAPIBackend.cs over ComfyUIAPIAbstractBackend.cs."""

    def api_address(self) -> str:
        dev = "/api" if self.settings.get("EnableFrontendDev") else ""
        return str(self.settings.get("Address", "")).rstrip("/") + dev

    def load_value_set(self) -> None:
        """LoadValueSet: GET object_info (1 minute); an answer with "error" is an error too."""
        with urllib.request.urlopen(f"{self.api_address()}/object_info", timeout=60) as reply:
            result = json.loads(reply.read())
        if isinstance(result, dict) and "error" in result:
            raise InitFailed(f"Remote error: {result['error']}")

    def init_internal(self, ignore_web_error: bool) -> None:
        self.max_usages = 1 + int(self.settings.get("OverQueue", 1))
        if not self.api_address():
            self.status = "disabled"
            return
        if self.status == "errored":  # "Refusing init because marked as errored."
            return
        self.status = "loading"
        try:
            self.load_value_set()
            self.status = "running"
        except (OSError, http.client.HTTPException) as e:  # HttpRequestException / TaskCanceledException
            if not ignore_web_error:
                raise InitFailed(str(e)) from None

    def init(self) -> None:
        self.init_internal(bool(self.settings.get("AllowIdle")))  # CanIdle => Settings.AllowIdle


class ComfyUISelfStartBackend(ComfyUIAPIBackend):
    """ComfyUISelfStartBackend.cs: a ComfyUI process of its own, on the next port."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.port = 0
        self.process: subprocess.Popen | None = None

    def api_address(self) -> str:
        return f"http://localhost:{self.port}"

    def init(self) -> None:
        self.handler.ensure_comfy_file()
        added = ""
        settings = self.settings
        if not settings["DisableInternalArgs"]:
            path_raw = str(self.handler.data_dir / "comfy-auto-model.yaml")
            added += f" --extra-model-paths-config {shlex.quote(path_raw) if ' ' in path_raw else path_raw}"
            if settings["EnablePreviews"] == "true":
                added += " --preview-method latent2rgb"
            elif settings["EnablePreviews"] == "taesd":
                added += " --preview-method taesd"
            if settings["FrontendVersion"] == "Latest":
                added += " --front-end-version Comfy-Org/ComfyUI_frontend@latest"
            elif settings["FrontendVersion"] == "LatestSwarmValidated":
                added += f" --front-end-version Comfy-Org/ComfyUI_frontend@v{SWARM_VALIDATED_FRONTEND_VERSION}"
            elif settings["FrontendVersion"] == "Legacy":
                added += " --front-end-version Comfy-Org/ComfyUI_legacy_frontend@latest"
        settings["StartScript"] = settings["StartScript"].strip(" \"'\n\r\t")
        if not settings["StartScript"].strip():
            self.status = "disabled"  # "Start script is empty, cannot load."
            return
        if not settings["StartScript"].endswith("main.py"):
            self.handler.log.warning(
                f"ComfyUI start script is '{settings['StartScript']}', which looks wrong"
                " - did you forget to append 'main.py' on the end?"
            )
        extra_args = settings["ExtraArgs"].strip() + " --port {PORT}" + added
        SelfStart(self, f"ComfyUI-{self.id}", settings["GPU_ID"], extra_args, bool(settings["AutoRestart"])).launch()

    def shutdown(self) -> None:
        super().shutdown()
        process = self.process
        if process is None or process.poll() is not None:
            return
        self.handler.log.info(f"Shutting down self-start ComfyUI (port={self.port}) process #{process.pid}...")
        kill_process(process, 10)


def kill_process(process: subprocess.Popen, grace_seconds: float) -> None:
    """Utilities.KillProcess: SIGINT, wait; SIGTERM, wait; then kill."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            process.send_signal(sig)
            process.wait(grace_seconds)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return
    process.kill()
    process.wait()


class SelfStart:
    """NetworkBackendUtils.DoSelfStart: one launch; AutoRestart makes the next one on a new port."""

    def __init__(self, backend: ComfyUISelfStartBackend, name: str, gpu_id: str, extra_args: str, auto_restart: bool):
        self.backend, self.name, self.gpu_id, self.extra_args, self.auto_restart = (
            backend, name, gpu_id, extra_args, auto_restart)  # fmt: skip
        self.log = backend.handler.log

    def launch(self) -> None:
        backend, handler = self.backend, self.backend.handler
        if handler.has_shutdown:
            return
        script = backend.settings["StartScript"]
        path = script.replace("\\", "/")
        ext = path.rsplit(".", 1)[-1]
        if not self.is_valid_start_path(path, ext):
            backend.status = "errored"
            return
        port = handler.ports.get_next_port()
        directory = os.path.dirname(path) or "."
        env = dict(os.environ)
        for key in ("PYTHONHOME", "PYTHONPATH", "PIP_REQUIRE_VIRTUALENV"):  # CleanEnvironmentOfPythonMess
            env.pop(key, None)
        if "python" in env.get("LIB", ""):
            env.pop("LIB")
        env |= {"PYTHONUNBUFFERED": "true", "YOLO_OFFLINE": "true", "DISABLE_TELEMETRY": "true",
                "DO_NOT_TRACK": "true", "PYTHONUTF8": "1"}  # fmt: skip
        env["CUDA_VISIBLE_DEVICES"] = self.gpu_id
        env["ROCR_VISIBLE_DEVICES"] = self.gpu_id
        post_args = shlex.split(self.extra_args.replace("{PORT}", str(port)))
        if path.endswith(".py"):
            executable, pre_args = configure_python_exe_for(path, env)
        else:
            executable, pre_args = os.path.abspath(path), []
        backend.status = "loading"
        backend.port = port
        state = {"status": "loading", "ever_loaded": False, "shutting_down": False}

        def revise(status: str) -> None:
            state["status"] = status
            backend.status = status

        # Process.Start: an interpreter that does not start throws, and LoadBackendDirect retries
        try:
            process = subprocess.Popen(
                [executable, *pre_args, *post_args], cwd=directory, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
        except OSError as e:
            raise InitFailed(f"An error occurred trying to start process '{executable}': {e}") from None
        backend.process = process
        handler.children.add(process)
        self.log.init(f"Self-Start {self.name} on port {port} is loading...")

        prefix = f"Self-Start {self.name} on port {port}"

        def on_fail() -> None:
            if handler.has_shutdown:
                return
            if not self.auto_restart:
                self.log.error(f"{prefix} failed. AutoRestart disabled, treating as fatal error.")
                revise("errored")
            elif state["ever_loaded"]:
                self.log.error(f"{prefix} failed. Restarting per configuration AutoRestart=true...")

                def relaunch() -> None:
                    time.sleep(2)
                    try:
                        self.launch()
                    except Exception as e:  # Utilities.RunCheckedTask logs it
                        self.log.error(f"Internal error in async task: {e}")

                threading.Thread(target=relaunch, daemon=True).start()
            else:
                self.log.error(f"{prefix} failed. AutoRestart ignored as this was an initial launch failure.")
                revise("errored")

        def expect_exit() -> None:
            state["shutting_down"] = True

        backend.on_shutdown.append(expect_exit)
        self.report_logs(process, state, revise, on_fail)
        checks = 0
        while state["status"] == "loading":
            checks += 1
            time.sleep(1)
            if checks % 10 == 0:
                self.log.debug(f"{self.name} port {port} waiting for server...")
            try:
                backend.init_internal(True)
                if backend.status == "running":
                    self.log.init(f"Self-Start {self.name} on port {port} started.")
                state["status"] = backend.status
            except Exception as e:  # a non-web error ends the loading, as upstream's does
                self.log.error(f"Self-Start {self.name} on port {port} failed to start: {e}")
                revise("errored")
                return
        state["ever_loaded"] = state["status"] != "errored"

    def is_valid_start_path(self, path: str, ext: str) -> bool:
        """NetworkBackendUtils.IsValidStartPath."""
        if len(path) < 5:
            return False
        if ext not in ("sh", "bat", "py"):
            self.log.error(
                f"Refusing init of {self.name} with non-script target. Please verify your start script location."
                f" Path was '{path}', which does not end in the expected 'py', 'bat', or 'sh'."
            )
            return False
        if not os.path.isfile(path):
            self.log.error(
                f"Failed init of {self.name} with script target '{path}' because that file does not exist."
                " Please verify your start script location."
            )
            return False
        return True

    def report_logs(self, process: subprocess.Popen, state: dict, revise, on_fail) -> None:
        """ReportLogsFromProcess: the end of stdout makes a running/loading backend ERRORED; the end of
        stderr, unless the exit was expected, calls on_fail. Error lines are shown as warnings."""
        name, backend, log = self.name, self.backend, self.log

        def show(stream: str, line: str, keep: bool) -> bool:
            low = line.lower()
            if low.startswith("traceback (") or ("error: " in low and "found comfy_kitchen backend" not in low):
                keep = True
            elif keep:
                keep = line.startswith("Traceback (") or "Error: " in line or line.startswith("  ")
            else:
                return False
            log.warning(f"[{name}/{stream}] {line}")
            return keep

        def stdout_loop() -> None:
            keep = False
            for raw in process.stdout:
                keep = show("STDOUT", raw.decode(errors="replace").rstrip("\n"), keep)
            if backend.status in ("running", "loading"):
                revise("errored")

        def stderr_loop() -> None:
            keep, errors = False, []
            for raw in process.stderr:
                line = raw.decode(errors="replace").rstrip("\n")
                keep = show("STDERR", line, keep)
                errors = [*errors, f"[{name}/STDERR] {line}"][-200:]
            process.wait()
            backend.handler.children.discard(process)
            if backend.status == "disabled":
                log.info(f"Self-Start {name} exited properly from disabling.")
            elif state["shutting_down"]:
                log.info(f"Self-Start {name} exited expectedly with exit code {process.returncode}")
            else:
                log.info(
                    f"Self-Start {name} unexpectedly exited (ExitCode={process.returncode})"
                    " (if something failed, change setting `LogLevel` to `Debug` to see why!)"
                )
                if errors:
                    log.info(f"Self-Start {name} had errors before shutdown:\n" + "\n".join(errors))
                on_fail()

        threading.Thread(target=stdout_loop, name=f"SelfStart{name}_Monitor", daemon=True).start()
        threading.Thread(target=stderr_loop, name=f"SelfStart{name}_MonitorErr", daemon=True).start()


def configure_python_exe_for(script: str, env: dict) -> tuple[str, list[str]]:
    """NetworkBackendUtils.ConfigurePythonExeFor (Linux): <dir>/venv/bin/python3 when it exists (.NET's
    File.Exists is true for a dangling link: such a venv fails at Process.Start), else python3 from
    PATH; arguments `-s main.py`; the venv first on PATH (PythonLaunchHelper.ReworkPythonPaths)."""
    directory = os.path.dirname(script) or "."
    venv_python = os.path.join(directory, "venv", "bin", "python3")
    if os.path.lexists(venv_python):
        venv = os.path.abspath(os.path.join(directory, "venv"))
        lib = os.path.join(venv, "lib")
        above = os.path.dirname(venv)
        env["PATH"] = f"{venv}:{venv}/bin:{venv}/lib:{lib}:{lib}/site-packages:{above}:{env.get('PATH', '')}"
        executable = os.path.abspath(venv_python)
    else:
        executable = "python3"
    return executable, ["-s", os.path.basename(script)]


BACKEND_CLASSES = {"comfyui_api": ComfyUIAPIBackend, "comfyui_selfstart": ComfyUISelfStartBackend}


class BackendHandler:
    def __init__(self, backends_file: Path, data_dir: Path, settings: dict, log):
        self.backends_file, self.data_dir, self.log = backends_file, data_dir, log
        network = settings.get("Network") if isinstance(settings.get("Network"), dict) else {}
        start = _typed(7820, network.get("BackendStartingPort", 7820))
        if _typed(False, network.get("BackendPortRandomize", "false")):
            start += int.from_bytes(os.urandom(2), "big") % 2000
        self.ports = Ports(start)
        self.backends: dict[int, Backend] = {}
        self.to_init: list[Backend] = []
        self.init_signal = threading.Event()
        self.lock = threading.Lock()
        self.children: set[subprocess.Popen] = set()
        self.has_shutdown = False
        self.is_loading = True
        self.fast_loaded = 0
        self.comfy_file_written = False
        self._status_cache: tuple[float, dict] | None = None

    def load(self) -> None:
        """BackendHandler.Load / LoadInternal."""
        self.log.init("Loading backends from file...")
        threading.Thread(target=self._init_monitor, name="BackendHandler_Init_Monitor", daemon=True).start()
        try:
            sections = parse_fds(self.backends_file.read_text())
        except FileNotFoundError:
            sections = {}
        for id_str, section in sections.items():
            if not isinstance(section, dict):
                continue
            kind = section.get("type", "")
            if kind not in BACKEND_TYPES:
                self.log.error(f"Unknown backend type '{kind}' in save file, skipping backend #{id_str}.")
                continue
            settings = section.get("settings") if isinstance(section.get("settings"), dict) else {}
            enabled, title = _typed(True, section.get("enabled", "true")), section.get("title", "")
            backend = BACKEND_CLASSES.get(kind, Backend)(self, int(id_str), kind, title, enabled, settings)
            self.do_init_backend(backend)
            with self.lock:
                self.backends[backend.id] = backend
        self.is_loading = False
        self.init_signal.set()

    def ensure_comfy_file(self) -> None:
        """ComfyUISelfStartBackend.EnsureComfyFile: Data/comfy-auto-model.yaml, the model paths for ComfyUI
        (the stand-in writes the base section only)."""
        if self.comfy_file_written:
            return
        models = (self.data_dir.parent / "Models").resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "comfy-auto-model.yaml").write_text(
            f"comfyui:\n    base_path: {models}\n    is_default: true\n    checkpoints: Stable-Diffusion\n"
        )
        self.comfy_file_written = True

    def do_init_backend(self, backend: Backend) -> None:
        backend.status = "waiting"
        if BACKEND_TYPES.get(backend.type, False):
            self.fast_loaded += 1
            wait = self.fast_loaded > 1 and self.is_loading
            delay = 1 + min(5, self.fast_loaded / 10)

            def fast() -> None:
                if wait:
                    time.sleep(delay)
                self.load_backend_direct(backend)

            threading.Thread(target=fast, daemon=True).start()
        else:
            with self.lock:
                self.to_init.append(backend)

    def load_backend_direct(self, backend: Backend) -> bool:
        if not backend.enabled:
            backend.status = "disabled"
            return False
        try:
            self.log.init(f"Initializing backend #{backend.id} - {backend.type}...")
            backend.init_attempts += 1
            backend.init()
            return True
        except Exception as e:  # LoadBackendDirect catches every init failure
            label = f"backend #{backend.id} - {backend.type}"
            if backend.init_attempts <= MAX_BACKEND_INIT_ATTEMPTS:
                backend.status = "waiting"
                self.log.error(f"Error #{backend.init_attempts} while initializing {label} - will retry")
                time.sleep(1)
                with self.lock:
                    self.to_init.append(backend)
            else:
                backend.status = "errored"
                self.log.error(f"Final error ({backend.init_attempts}) while initializing {label}, giving up: {e}")
            return False

    def _init_monitor(self) -> None:
        """InternalInitMonitor: the queued inits, one after another; then a wait of up to 2 s."""
        while not self.has_shutdown:
            while not self.has_shutdown:
                with self.lock:
                    backend = self.to_init.pop(0) if self.to_init else None
                if backend is None:
                    break
                self.load_backend_direct(backend)
            self.init_signal.wait(2)
            self.init_signal.clear()

    def all(self) -> list[Backend]:
        with self.lock:
            return [self.backends[k] for k in sorted(self.backends)]

    def current_status(self) -> dict:
        """BackendHandler.CurrentBackendStatus, in its order, cached for 1 s."""
        now = time.monotonic()
        if self._status_cache and now - self._status_cache[0] < 1:
            return self._status_cache[1]
        value = aggregate_status(self.all())
        self._status_cache = (now, value)
        return value

    def supported_features(self) -> list[str]:
        """GetAllSupportedFeatures: of the enabled backends that are not idle."""
        features: list[str] = []
        for b in self.all():
            if b.enabled and b.status != "idle":
                features += [f for f in b.features if f not in features]
        return features

    def restart(self, which: str = "all") -> int:
        """BackendAPI.RestartBackends: each RUNNING or ERRORED backend is shut down and initialized again."""
        count = 0
        for backend in self.all():
            if which != "all" and which != str(backend.id):
                continue
            if backend.status in ("running", "errored"):
                backend.do_shutdown_now()
                self.do_init_backend(backend)
                count += 1
        return count

    def shutdown(self) -> None:
        """BackendHandler.Shutdown: every backend shut down (each ComfyUI stopped), side by side."""
        if self.has_shutdown:
            return
        self.has_shutdown = True
        self.init_signal.set()
        threads = [threading.Thread(target=b.do_shutdown_now) for b in self.all()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(25)
        for process in list(self.children):  # a launch caught mid-way: never leave a ComfyUI behind
            if process.poll() is None:
                process.kill()


MESSAGES = {  # CurrentBackendStatus: status -> (class, message)
    "empty": ("error", "No backends present. You must configure backends in the Backends section of the Server tab"
              " before you can continue."),
    "all_disabled": ("error", "All backends are disabled. You must enable backends in the Backends section of the"
                     " Server tab before you can continue."),
    "errored": ("error", "Some backends have errored on the server. Check the server logs for details."),
    "some_loading": ("warn", "Some backends are ready, but others are still loading..."),
    "running": ("", ""),
    "loading": ("soft", "Backends are still loading on the server..."),
    "disabled": ("warn", "Some backends are disabled. Please enable or configure them to continue."),
    "idle": ("warn", "All backends are idle. Cannot generate until at least one backend is running."),
    "unknown": ("error", "Something is wrong with your backends. Please check the Backends section of the Server"
                " tab, or the server logs."),
}  # fmt: skip


def aggregate_status(backends: list[Backend]) -> dict:
    def status(name: str, any_loading: bool = False) -> dict:
        css, message = MESSAGES[name]
        return {"status": name, "class": css, "message": message, "any_loading": any_loading}

    if not backends:
        return status("empty")
    if all(not b.enabled for b in backends):
        return status("all_disabled")
    states = [b.status for b in backends]
    loading = sum(s in ("loading", "waiting") for s in states)
    if "errored" in states:
        return status("errored", loading > 0)
    if "running" in states:
        return status("some_loading", True) if loading else status("running")
    if loading:
        return status("loading", True)
    if "disabled" in states:
        return status("disabled")
    if "idle" in states:
        return status("idle")
    return status("unknown")
