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
- ComfyUISelfStartBackend.cs DoLibFixes (lines 480-720), awaited by Init before the ComfyUI launch: the
  lib folder (NetworkBackendUtils.GetProbableLibFolderFor) is read once; each required package it lacks
  (RequiredPythonPackages, numpy, RequiredVersionPythonPackages, the frontend) is a child process
  `<venv>/bin/python3 -s -m pip install <pipName>` (DoPythonCall), awaited one after another, the
  backend WAITING all along (it is LOADING only from DoSelfStart on). The pip is pip_standin/pip.py: it
  takes STANDIN_PIP_INSTALL_SECONDS (0.05 s) per call and writes the package's dist-info folder, so the next
  start finds it there and installs nothing.
Not imitated: git auto-updates, the node repos, DoLibFixes' branches for the DLNodes IPAdapter/nunchaku
node repos (the stand-in installs none).

One file of ~930 lines on purpose: as upstream's BackendHandler and NetworkBackendUtils do, the
handler, the backend types and the self-start launch call into each other; read apart, the order of a
backend's states would be lost.
"""

import http.client
import json
import os
import re
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
# ComfyUISelfStartBackend.RequiredPythonPackages: (folder in the lib folder, what pip installs)
REQUIRED_PYTHON_PACKAGES = [
    ("kornia", "kornia"), ("sentencepiece", "sentencepiece"), ("spandrel", "spandrel"), ("pydantic", "pydantic"),
    ("pydantic_settings", "pydantic-settings"),
    ("comfyui_frontend_package", f"comfyui_frontend_package=={SWARM_VALIDATED_FRONTEND_VERSION}"),
    ("alembic", "alembic"), ("simpleeval", "simpleeval"), ("blake3", "blake3"), ("filelock", "filelock"),
    ("comfy_angle", "comfy-angle"), ("rembg", "rembg"), ("onnxruntime", "onnxruntime"), ("matplotlib", "matplotlib"),
    ("opencv_python_headless", "opencv-python-headless"), ("imageio_ffmpeg", "imageio-ffmpeg"), ("dill", "dill"),
    ("omegaconf", "omegaconf"),
]  # fmt: skip
# ComfyUISelfStartBackend.RequiredVersionPythonPackages: (lib folder, pip name, relation, version); av twice, as there
REQUIRED_VERSION_PYTHON_PACKAGES = [
    ("diffusers", "diffusers", ">=", "0.36.0"), ("aiohttp", "aiohttp", ">=", "3.11.8"),
    ("yarl", "yarl", ">=", "1.18.0"), ("av", "av", ">=", "14.2.0"), ("spandrel", "spandrel", ">=", "0.4.1"),
    ("transformers", "transformers", ">=", "4.57.3"), ("pyopengl", "pyopengl", ">=", "3.1.8"),
    ("av", "av", ">=", "18.1.0"), ("ultralytics", "ultralytics", "==", "8.3.197"), ("pip", "pip", ">=", "25.0"),
]  # fmt: skip
# the pip DoLibFixes' children run: put first on their PYTHONPATH, `-m pip` finds it before the venv's own
PIP_STANDIN = Path(__file__).resolve().parent / "pip_standin"
REQUIREMENT_PART = re.compile(r"^[A-Za-z0-9._-]*$")  # ComfyUISelfStartBackend.RequirementPartMatcher
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

    def add_load_status(self, message: str) -> None:
        """AbstractBackend.AddLoadStatus: a Debug line (dropped at the default LogLevel, as upstream's)."""
        self.handler.log.debug(f"[Load {self.type} #{self.id}] {message}")

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
        self.add_load_status("Starting init...")
        self.handler.ensure_comfy_file()
        added = ""
        do_fix_frontend = do_latest_frontend = False
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
                do_latest_frontend = True
            elif settings["FrontendVersion"] == "LatestSwarmValidated":
                added += f" --front-end-version Comfy-Org/ComfyUI_frontend@v{SWARM_VALIDATED_FRONTEND_VERSION}"
                do_fix_frontend = True
            elif settings["FrontendVersion"] == "Legacy":
                added += " --front-end-version Comfy-Org/ComfyUI_legacy_frontend@latest"
            self.add_load_status(f"Will add args: {added}")
        settings["StartScript"] = settings["StartScript"].strip(" \"'\n\r\t")
        if not settings["StartScript"].strip():
            self.add_load_status("Start script is empty, cannot load.")
            self.status = "disabled"
            return
        if not settings["StartScript"].endswith("main.py"):
            self.add_load_status(f"Start script '{settings['StartScript']}' looks wrong")
            self.handler.log.warning(
                f"ComfyUI start script is '{settings['StartScript']}', which looks wrong"
                " - did you forget to append 'main.py' on the end?"
            )
        # git auto-update and node repo tasks: not imitated (AutoUpdate / UpdateManagedNodes off on the ground)
        LibFixes(self).run(do_fix_frontend, do_latest_frontend)
        self.add_load_status("Starting self-start ComfyUI process...")
        extra_args = settings["ExtraArgs"].strip() + " --port {PORT}" + added
        SelfStart(self, f"ComfyUI-{self.id}", settings["GPU_ID"], extra_args, bool(settings["AutoRestart"])).launch()

    def shutdown(self) -> None:
        super().shutdown()
        process = self.process
        if process is None or process.poll() is not None:
            return
        self.handler.log.info(f"Shutting down self-start ComfyUI (port={self.port}) process #{process.pid}...")
        kill_process(process, 10)


def dotnet_version(text: str) -> tuple[int, ...]:
    """System.Version.Parse: 2 to 4 numbers (ValueError otherwise), the missing ones -1 so that 1.2 < 1.2.0."""
    parts = text.split(".")
    if not 2 <= len(parts) <= 4:
        raise ValueError(f"Version string portion was too short or too long: '{text}'")
    numbers = [int(p) for p in parts]
    if any(n < 0 for n in numbers):
        raise ValueError(f"Version's parameters must be greater than or equal to zero: '{text}'")
    return tuple(numbers + [-1] * (4 - len(numbers)))


def parse_version(text: str) -> tuple[int, ...] | None:
    """ComfyUISelfStartBackend.ParseVersion: Version.Parse of what is before ".dev", null when invalid."""
    try:
        return dotnet_version(text.split(".dev", 1)[0])
    except ValueError:
        return None


def version_lt(a: tuple[int, ...] | None, b: tuple[int, ...] | None) -> bool:
    """Version's operator <: null is below every version."""
    if a is None:
        return b is not None
    return b is not None and a < b


def version_str(version: tuple[int, ...] | None) -> str:
    return "" if version is None else ".".join(str(n) for n in version if n >= 0)


def read_requirements(path: str) -> dict[str, tuple[int, ...] | None]:
    """DoLibFixes' reqs: requirements.txt (File.ReadAllLines: missing, it throws), each line not blank nor
    a comment, ">=" and "<=" read as "==", kept when its parts are plain (RequirementPartMatcher); the
    version is Version.Parse'd (an invalid one throws, as a name twice does: ToDictionary)."""
    with open(path, encoding="utf-8-sig") as file:
        lines = [s for s in file.read().splitlines() if s.strip() and not s.strip().startswith("#")]
    reqs: dict[str, tuple[int, ...] | None] = {}
    for line in lines:
        pair = line.replace(">=", "==").replace("<=", "==").split("==")
        if not REQUIREMENT_PART.match(pair[0]) or (len(pair) > 1 and not REQUIREMENT_PART.match(pair[1])):
            continue
        if pair[0] in reqs:
            raise ValueError(f"An item with the same key has already been added. Key: {pair[0]}")
        reqs[pair[0]] = None if len(pair) == 1 else dotnet_version(pair[1])
    return reqs


def starts_an_error(line: str) -> bool:
    """ReportLogsFromProcess: a line that begins an error on stderr (comfy_kitchen's notice is none)."""
    low = line.lower()
    return low.startswith("traceback (") or ("error: " in low and "found comfy_kitchen backend" not in low)


def report_logs_exit_expected(process: subprocess.Popen, name: str, log) -> None:
    """NetworkBackendUtils.ReportLogsFromProcess(process, nameSimple, identifier) - the overload with
    exitPreExpected=true that DoLibFixes' pipCall uses: error lines are warnings, the rest Debug; the
    exit is logged at Info, nothing else follows it."""

    def should_continue(line: str) -> bool:
        return (line.startswith("Traceback (") or line.startswith("  ")
                or ("Error: " in line and not line.startswith("Found comfy_kitchen backend")))  # fmt: skip

    def log_stream(stream, label: str, starts) -> None:
        keep = False
        for raw in stream:
            line = raw.decode(errors="replace").rstrip("\n")
            if starts(line):
                keep = True
                log.warning(f"[{name}/{label}] {line}")
            elif keep:
                log.warning(f"[{name}/{label}] {line}")
                keep = should_continue(line)
            else:
                log.debug(f"[{name}/{label}] {line}")

    def stdout_loop() -> None:
        log_stream(process.stdout, "STDOUT", lambda line: line.startswith(("Traceback (", "RuntimeError: ", "Error: ")))

    def stderr_loop() -> None:
        log_stream(process.stderr, "STDERR", starts_an_error)
        try:
            code = process.wait(20)
        except subprocess.TimeoutExpired:
            log.info(f"Self-Start {name} closed output stream without exiting - something went wrong.")
            return
        if code == 0:
            log.info(f"Self-Start {name} exited properly.")
        else:
            log.info(f"Self-Start {name} exited expectedly but with unexpected exit code {code}")

    thread_name = name.replace(" ", "_")
    threading.Thread(target=stdout_loop, name=f"SelfStart{thread_name}_Monitor", daemon=True).start()
    threading.Thread(target=stderr_loop, name=f"SelfStart{thread_name}_MonitorErr", daemon=True).start()


class LibFixes:
    """ComfyUISelfStartBackend.DoLibFixes (lines 480-720), with DoPythonCall (329-341): run in Init, on the
    init monitor thread, before DoSelfStart; the backend stays WAITING (DoInitBackend's) throughout."""

    def __init__(self, backend: "ComfyUISelfStartBackend"):
        self.backend, self.log = backend, backend.handler.log
        self.script = backend.settings["StartScript"]
        self.libs: set[str] = set()
        self.distinfos: list[str] = []

    def do_python_call(self, call: str) -> subprocess.Popen:
        """DoPythonCall: ConfigurePythonExeFor's python (the venv's, its folder first on PATH; cwd the start
        script's folder), SwarmUI's environment otherwise. Stand-in only: pip_standin first on PYTHONPATH,
        so that `-m pip` runs the stand-in pip (the ground has no network for the real one)."""
        self.log.debug(f"Will do Comfy Python call: {call}")
        env = dict(os.environ)
        executable, _ = configure_python_exe_for(self.script, env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PIP_STANDIN), env.get("PYTHONPATH")) if p)
        argv = [executable, *shlex.split(call.strip())]  # forcePrior is "" off Windows
        try:
            return subprocess.Popen(
                argv, cwd=os.path.dirname(self.script) or ".", env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
        except OSError as e:  # Process.Start throws: Init fails, LoadBackendDirect retries
            raise InitFailed(f"An error occurred trying to start process '{executable}': {e}") from None

    def pip_call(self, reason: str, call: str) -> None:
        """pipCall: one pip child, its output reported, awaited (Program.GlobalProgramCancel ends the wait)."""
        backend, handler = self.backend, self.backend.handler
        backend.add_load_status(f"{reason} for ComfyUI...")
        process = self.do_python_call(f"-s -m pip {call}")
        report_logs_exit_expected(process, f"ComfyUI ({reason})", self.log)
        while process.poll() is None:
            if handler.has_shutdown:
                raise InitFailed("The operation was canceled.")
            time.sleep(0.05)
        backend.add_load_status(f"Done {reason} for ComfyUI.")

    def install(self, lib_folder: str, pip_name: str) -> None:
        if lib_folder in self.libs:
            return
        self.pip_call(f"Installing '{pip_name}'", f"install {pip_name}")
        self.libs.add(lib_folder)

    def update(self, name: str, pip: str) -> None:
        self.pip_call(f"Updating '{name}'", f"install {pip}")
        self.libs.add(name)

    def get_vers(self, package: str) -> str | None:
        """getVers: from the first `<package>-<version>.dist-info` folder as the lib folder was read at the
        start (not again after an install), the version before any '+'."""
        prefix = f"{package}-"
        found = next((d for d in self.distinfos if d.startswith(prefix)), None)
        return None if found is None else found[len(prefix) :].split(".dist-info", 1)[0].split("+", 1)[0]

    def run(self, do_fix_frontend: bool, do_latest_frontend: bool) -> None:
        backend = self.backend
        lib = get_probable_lib_folder_for(self.script, self.log)
        if lib is None or len(lib) < 3:
            backend.add_load_status("Skip lib validation, can't find folder.")
            return
        backend.add_load_status("Will validate required libs...")
        reqs = read_requirements(os.path.dirname(self.script) + "/requirements.txt")
        dirs = sorted(e.name for e in os.scandir(lib) if e.is_dir())  # Directory.GetDirectories
        self.distinfos = [d for d in dirs if d.endswith(".dist-info")]
        self.libs = {d.split("-", 1)[0].lower() for d in dirs}
        if "pip" not in self.libs:
            self.log.warning(f"Python lib folder at '{lib}' appears to not contain pip. Python operations will likely"
                             " fail. Please make sure your system has a valid python3-pip install.")  # fmt: skip
        for lib_folder, pip_name in REQUIRED_PYTHON_PACKAGES:
            self.install(lib_folder, pip_name)
        numpy_vers = self.get_vers("numpy")
        if numpy_vers is None or version_lt(parse_version(numpy_vers), dotnet_version("1.25")):
            self.update("numpy", "numpy==1.26.4")
        for lib_folder, pip_name, rel, version in REQUIRED_VERSION_PYTHON_PACKAGES:
            raw = self.get_vers(lib_folder)
            current = None if raw is None else parse_version(raw)
            wanted = parse_version(version)
            do_update = current is None
            if not do_update:
                if rel in (">=", "=="):
                    do_update = version_lt(current, wanted)
                elif rel == "<=":
                    do_update = version_lt(wanted, current)
                elif rel == "force-eq":
                    do_update = current != wanted
                else:
                    raise ValueError(f"Invalid version relation '{rel}' for package '{lib_folder}' with version"
                                     f" '{version}'.")  # fmt: skip
            if do_update:
                if rel == "force-eq":
                    self.pip_call(f"Remove old '{lib_folder}'", f"uninstall -y {pip_name}")
                    self.pip_call(lib_folder, f"install {pip_name}{rel}{version}")
                else:
                    self.update(lib_folder, f"{pip_name}{rel}{version}")
        frontend = self.get_vers("comfyui_frontend_package")
        if do_fix_frontend and (frontend is None or frontend != SWARM_VALIDATED_FRONTEND_VERSION):
            self.update("comfyui_frontend_package", f"comfyui-frontend-package=={SWARM_VALIDATED_FRONTEND_VERSION}")
        if "comfyui_frontend_package" in reqs:
            front = version_str(reqs["comfyui_frontend_package"])
            if front != SWARM_VALIDATED_FRONTEND_VERSION:
                self.log.warning(f"(Developer Notice) ComfyUI Frontend target version is {front}, but validated"
                                 f" version is {SWARM_VALIDATED_FRONTEND_VERSION}")  # fmt: skip
        for folder, req in (("comfyui_workflow_templates", "comfyui-workflow-templates"),
                            ("comfyui_embedded_docs", "comfyui-embedded-docs")):  # fmt: skip
            actual = self.get_vers(folder)
            stale = actual is None or version_lt(parse_version(actual), reqs.get(req))
            if (do_fix_frontend or do_latest_frontend) and req in reqs and stale:
                self.update(folder, f"{req}=={version_str(reqs[req])}")
        if do_latest_frontend:
            self.update("comfyui_frontend_package", "comfyui-frontend-package")
        elif not do_fix_frontend:
            self.install("comfyui_frontend_package", "comfyui-frontend-package")
        for folder, req in (("comfy_kitchen", "comfy-kitchen"), ("comfy_aimdo", "comfy-aimdo")):
            actual = self.get_vers(folder)
            if req in reqs and (actual is None or version_lt(parse_version(actual), reqs[req])):
                self.update(folder, f"{req}=={version_str(reqs[req])}")
        # the DLNodes ComfyUI_IPAdapter_plus / ComfyUI-nunchaku branches: not imitated (no node repos here)
        for req in reqs:
            if req.replace("-", "_").lower() not in self.libs:
                self.log.warning(f"(Developer Warning) ComfyUI required package '{req}' not found in lib folder. May"
                                 " be an install error, or may be a new dependency.")  # fmt: skip
        backend.add_load_status("Done validating required libs.")


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
            if starts_an_error(line):
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


def get_probable_lib_folder_for(script: str, log) -> str | None:
    """NetworkBackendUtils.GetProbableLibFolderFor (lines 228-279): venv/lib/python*/site-packages when
    venv/bin/python3 exists (File.Exists, as ConfigurePythonExeFor; a missing venv/lib throws), else the
    python ConfigurePythonExeFor picks asked for sysconfig's purelib, kept if it is a folder."""
    directory = os.path.dirname(script.replace("\\", "/"))
    if os.path.isfile(f"{directory}/venv/Scripts/python.exe"):
        return os.path.abspath(f"{directory}/venv/Lib/site-packages") + "/"
    if os.path.isfile(f"{directory}/../python_embeded/python.exe"):
        return os.path.abspath(f"{directory}/../python_embeded/Lib/site-packages") + "/"
    if os.path.lexists(f"{directory}/venv/bin/python3"):
        for sub in sorted(e.path for e in os.scandir(f"{directory}/venv/lib/") if e.is_dir()):
            if os.path.basename(sub).startswith("python"):
                return os.path.abspath(f"{sub}/site-packages") + "/"
    try:
        env = dict(os.environ)
        executable, _ = configure_python_exe_for(script, env)
        found = subprocess.run(
            [executable, "-s", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            cwd=directory or ".", env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        )  # fmt: skip
        output = found.stdout.strip()
        errors = found.stderr.strip()
        log.debug(f"Ran python fallback folder-finder '{executable}', result is: {output}, errOut is {errors}")
        if os.path.isdir(output):
            return output
        log.debug("Output is not a valid folder.")
    except OSError as e:
        log.debug(f"Failed to find lib folder for {script}: {e}")
    return None


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
