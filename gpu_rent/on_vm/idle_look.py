"""What the idle-killer looks at on the VM, one function per thing that may keep it.

SwarmUI's GetGlobalStatus and ListBackends (one session kept from tick to tick), every ComfyUI's
own queue at the port its command line names, the installs SwarmUI's service runs, partial downloads,
the lock and hold files, the data volume, each GPU's utilisation, the newest key typed in a terminal,
the LLM runtime's own activity (Ollama's loaded models, llama.cpp's slots), and the user's
KEEP_ALIVE_COMMAND. Each returns what it saw or why it saw nothing; idle_decision decides. Standard
library only, installed with idle_killer in the on_vm package on the VM.

One file of ~700 lines on purpose: it is the one list of everything that can keep a VM alive, a short
function each, read as a whole when a VM was (or was not) deleted.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import pwd
import re
import select
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from .idle_decision import OUR_START_SCRIPT, LlmLook, our_backends

HTTP_TIMEOUT = 10
# ComfyUI answers its routes while a prompt runs (aiohttp beside the execution thread); a busy GPU
# host may make it slow, so it is given more than a moment before it counts as not answering.
COMFY_TIMEOUT = 5
# A "*.tmp" under Models written to within this long means a download runs (SwarmUI's own
# downloads write <name>.download.tmp, its workflow auto-downloads <file>.tmp); so does an Ollama pull
# anyone started (server/download.go: blobs/sha256-<hex>-partial, its parts' -partial-<N>).
DOWNLOAD_FRESH_SECONDS = 120
_PARTIAL_BLOB = re.compile(r"sha256-[0-9a-f]{64}-partial(-\d+)?")
FUTURE_SLACK = 5  # seconds a partial file's mtime may lie ahead of this clock and still count


def why(error: BaseException) -> str:
    """An exception in a few words: "HTTP 503 Service Unavailable", "[Errno 111] Connection refused"."""
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        return str(error.reason)
    return str(error) or type(error).__name__


def _post_json(url: str, body: dict, timeout: float = HTTP_TIMEOUT) -> dict:
    """A POST and its JSON object. SwarmUI's API errors are answers too: src/WebAPI/API.cs sends
    HTTP 401 for an unknown session (error_id invalid_session_id) and HTTP 400 for the others
    (bad_permissions, bad_route, basic_api ...), each with the JSON error as its body."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            answer = json.loads(reply.read() or b"{}")
    except http.client.HTTPException as e:  # a SwarmUI restarting cut its answer short
        raise _not_http(e) from None
    except urllib.error.HTTPError as e:
        if not 400 <= e.code < 500:
            raise
        try:
            answer = json.loads(e.read() or b"{}")
        except (OSError, ValueError):
            raise e from None
        if not _is_error(answer):
            raise e from None
    if not isinstance(answer, dict):
        raise ValueError(f"not a JSON object: {str(answer)[:60]}")
    return answer


def _is_error(answer: object) -> bool:
    return isinstance(answer, dict) and ("error_id" in answer or "error" in answer)


@dataclass(frozen=True)
class SwarmLook:
    status: dict | None  # GetGlobalStatus's answer, or the error it answered with (+ "route")
    error: str | None  # why SwarmUI did not answer
    backends: tuple[str, ...] | None  # our backends' states from ListBackends; None: not read
    backends_error: str | None  # why ListBackends was not read
    session_id: str | None  # the session to reuse next tick


def swarm_look(url: str, session_id: str | None, start_script: str = OUR_START_SCRIPT) -> SwarmLook:
    """GetGlobalStatus (all sessions' counters, not this caller's) and ListBackends, in one session.

    The session is kept from tick to tick (SwarmUI keeps sessions across its restarts, in
    Data/Users.ldb); one SwarmUI does not know (HTTP 401 invalid_session_id) is replaced at once,
    within the tick. Any other error is the answer, named by its error_id."""
    session = [session_id]

    def call(route: str) -> dict:
        for _ in range(2):
            if not session[0]:
                new = _post_json(f"{url}/API/GetNewSession", {})
                if _is_error(new) or not isinstance(new.get("session_id"), str):
                    return {"error": "no session_id in its answer"} | new | {"route": "GetNewSession"}
                session[0] = new["session_id"]
            answer = _post_json(f"{url}/API/{route}", {"session_id": session[0]})
            if answer.get("error_id") != "invalid_session_id":
                return answer | {"route": route} if _is_error(answer) else answer
            session[0] = None  # unknown to SwarmUI (expired, or its Data lost): a new one, now
        return answer | {"route": route}  # a session SwarmUI made a moment ago, refused

    try:
        status = call("GetGlobalStatus")
    except (OSError, ValueError) as e:
        return SwarmLook(None, why(e), None, None, session[0])
    if _is_error(status):
        return SwarmLook(status, None, None, None, session[0])
    backends, backends_error = None, None
    try:
        listing = call("ListBackends")
        if _is_error(listing):
            backends_error = f"{listing.get('error_id') or ''} {listing.get('error') or ''}".strip()
        else:
            backends = our_backends(listing, start_script)
    except (OSError, ValueError) as e:
        backends_error = why(e)
    return SwarmLook(status, None, backends, backends_error, session[0])


def unit_pids(cgroup_root: str, unit: str, proc: str = "/proc") -> list[int]:
    """The processes of a systemd service: its cgroup's (cgroup v2), else every process whose
    /proc/<pid>/cgroup names the unit (cgroup v1, or a cgroup tree mounted elsewhere)."""
    top = Path(cgroup_root, "system.slice", unit)
    if top.is_dir():
        pids = []
        for folder, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError, ValueError):
                    pids += [int(p) for p in Path(folder, "cgroup.procs").read_text().split()]
        return pids
    pids = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(proc):
            if not entry.name.isdigit():
                continue
            try:
                lines = Path(entry.path, "cgroup").read_text().splitlines()
            except OSError:
                continue  # ended meanwhile
            if any(unit in line.split(":", 2)[-1].split("/") for line in lines):
                pids.append(int(entry.name))
    return pids


def comfy_port(argv: list[str]) -> int | None:
    """The port of a ComfyUI from its command line, None when it is none: SwarmUI starts it as
    `<venv>/bin/python3 -s main.py <ExtraArgs> --port N <args>` (NetworkBackendUtils.DoSelfStart;
    ComfyUI's comfy/cli_args.py reads --port, the last one given)."""
    if not any(os.path.basename(a) == "main.py" for a in argv):
        return None
    port = None
    for i, arg in enumerate(argv):
        if arg == "--port" and i + 1 < len(argv):
            port = argv[i + 1]
        elif arg.startswith("--port="):
            port = arg.split("=", 1)[1]
    try:
        return int(port) if port is not None else None
    except ValueError:
        return None


def unit_commands(cgroup_root: str, unit: str, proc: str = "/proc") -> list[list[str]]:
    """The command line of each process of a systemd service (unit_pids), read once a tick for both
    looks that need them: ComfyUI's ports and the installs."""
    commands = []
    for pid in unit_pids(cgroup_root, unit, proc):
        try:
            argv = Path(proc, str(pid), "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue  # ended meanwhile
        commands.append(argv[:-1] if argv[-1] == "" else argv)  # /proc ends each argument with a NUL
    return commands


def comfy_ports_of(commands: list[list[str]]) -> tuple[int, ...]:
    """The ports of the ComfyUI processes SwarmUI runs now. They move: the first gets 7821, each
    (re)launch the next (NetworkBackendUtils.GetNextPort), +0..1999 with BackendPortRandomize."""
    return tuple(sorted({port for argv in commands if (port := comfy_port(argv)) is not None}))


def live_comfy_ports(cgroup_root: str, unit: str, proc: str = "/proc") -> tuple[int, ...]:
    return comfy_ports_of(unit_commands(cgroup_root, unit, proc))


# Work SwarmUI's service does in processes of its own that no counter and no queue tells (upstream-llm-audit
# U6), each seen by its command line:
# - pip: ComfyUIWebAPI.ComfyInstallFeatures -> ComfyUISelfStartBackend.EnsureNodeRepo runs `<venv python> -s -m
#   pip install -r requirements.txt` (DoPythonCall) while the backend runs; DoLibFixes and ComfyUpdateTorch run
#   `-s -m pip install|uninstall ...` the same way. ComfyUI-Manager (its --enable-manager) runs
#   `sys.executable -m pip install` under the ComfyUI process, or `-m uv pip install` with its use_uv;
# - git: EnsureNodeRepo's `git clone <url>` (Utilities.RunGitProcess), the auto-update's `git pull`, the update
#   check's `git fetch` (Program.cs CheckForUpdates, AdminAPI.GetUpdatesDataFor), ComfyUI-Manager's clones and
#   pulls (GitPython runs git);
# - UtilAPI.Pickle2SafeTensor: `<venv python> launchtools/pickle-to-safetensors.py <folder> <fp16>`
#   (PythonLaunchHelper.LaunchGeneric), which writes each .safetensors beside its pickle under Models, no *.tmp.
_PYTHON = re.compile(r"python[0-9.]*")
_PIP = re.compile(r"pip[0-9.]*")
_PIP_VERBS = {"install", "uninstall", "download", "wheel"}  # `pip list`, `pip show`, `--version` only read
_UV_VERBS = {"sync", "add", "remove"}  # and `uv pip <a pip verb>`
_GIT_VERBS = {"clone", "fetch", "pull"}
_GIT_OPTIONS_WITH_VALUE = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"}
_CONVERTER = "pickle-to-safetensors.py"
_INSTALL_WORDS = 100  # a requirement list may be long: the reason line keeps its start


def install_work(argv: list[str]) -> str | None:
    """What an install or conversion process does, in words ("installing: pip install -r requirements.txt");
    None for any other process."""
    if not argv:
        return None
    program, rest = os.path.basename(argv[0]), argv[1:]
    if _PYTHON.fullmatch(program):  # `python -s -m pip ...`, or a script: `python /venv/bin/pip ...`
        program, rest = _python_target(rest)
    verb = _verb(rest)
    if _PIP.fullmatch(program) and verb in _PIP_VERBS:
        return _words("installing", "pip", rest)
    if program == "uv" and (
        verb in _UV_VERBS or (verb == "pip" and _verb(rest[rest.index("pip") + 1 :]) in _PIP_VERBS)
    ):
        return _words("installing", "uv", rest)
    if program == "git" and _git_verb(rest) in _GIT_VERBS:
        return _words("installing", "git", rest)
    if program == _CONVERTER:
        return _words("converting", program, rest)
    return None


def _python_target(args: list[str]) -> tuple[str, list[str]]:
    """(the module or script a python runs, its arguments); ("", []) for `-c` or an interactive python."""
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == "-m" and i + 1 < len(args):
            return args[i + 1], args[i + 2 :]
        elif arg.startswith("-m") and len(arg) > 2:
            return arg[2:], args[i + 1 :]
        elif arg.startswith("-c"):
            return "", []
        elif arg in ("-X", "-W", "-Q"):
            skip = True  # an option that takes the next word
        elif not arg.startswith("-") or arg == "-":
            return os.path.basename(arg), args[i + 1 :]
    return "", []


def _verb(args: list[str]) -> str | None:
    return next((a for a in args if not a.startswith("-")), None)


def _git_verb(args: list[str]) -> str | None:
    """git's subcommand, after its global options (`git -C <dir> pull`, `git -c k=v clone`)."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in _GIT_OPTIONS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _words(doing: str, program: str, args: list[str]) -> str:
    said = " ".join([program, *args])
    return f"{doing}: {said if len(said) <= _INSTALL_WORDS else said[: _INSTALL_WORDS - 3] + '...'}"


def installs_of(commands: list[list[str]]) -> tuple[str, ...]:
    """Each install or conversion among the service's processes, in words, once each (pip's own children,
    git's helpers are no second one: their command lines are other verbs)."""
    return tuple(dict.fromkeys(w for argv in commands if (w := install_work(argv)) is not None))


def comfy_queues(ports: tuple[int, ...]) -> list[dict]:
    """Each ComfyUI's own queue, running and pending (ComfyUI server.py GET /prompt:
    exec_info.queue_remaining); None for one that does not answer (still loading, or gone)."""
    found = []
    for port in ports:
        queue = None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/prompt", timeout=COMFY_TIMEOUT) as reply:
                answer = json.loads(reply.read())
            queue = int(answer["exec_info"]["queue_remaining"])
        except (OSError, ValueError, TypeError, KeyError, http.client.HTTPException):
            pass  # a ComfyUI restarting may cut its answer short (IncompleteRead, BadStatusLine)
        found.append({"port": port, "queue": queue})
    return found


# the LLM runtime answers its status routes beside its work (Ollama's are goroutines of its Go server,
# llama-server's a task between two decode steps): a few seconds, then it counts as not telling
LLM_TIMEOUT = 5
# a route that is not there (404) or switched off (llama-server's 501 not_supported_error for /slots
# without --slots, /metrics without --metrics): nothing to read, and nothing to invent in its place
_ROUTE_OFF = (404, 501)


def llm_look(runtime: str, url: str, timeout: float = LLM_TIMEOUT) -> LlmLook:
    """What the LLM runtime on the VM says of its own activity: Ollama's loaded models, or llama.cpp's
    slots (its /metrics where /slots is off)."""
    if runtime == "ollama":
        return _ollama_look(url, timeout)
    return _llamacpp_look(url, timeout)


def _ollama_look(url: str, timeout: float) -> LlmLook:
    """GET /api/ps (Ollama's docs/api.md "List Running Models"; server/routes.go PsHandler):
    {"models": [{"name", "model", "size", "digest", "details", "expires_at", "size_vram", ...}]}, every
    model loaded now; name as Name.DisplayShortest, expires_at an RFC 3339 time."""
    try:
        answer = _get(f"{url}/api/ps", timeout)
        models = json.loads(answer)["models"] or []
        if not isinstance(models, list) or not all(isinstance(m, dict) for m in models):
            raise ValueError("models is not a list of models")
        found = tuple((str(m.get("name") or m.get("model") or "?"), go_time(m.get("expires_at"))) for m in models)
    except (OSError, ValueError, TypeError, KeyError) as e:
        if _timed_out(e) and _answers(f"{url}/api/version", min(timeout, 2.0)):
            # server/sched.go load holds the new runner's refMu until it runs, and loadedModels (PsHandler)
            # locks every runner's: /api/ps waits for a whole load while the rest of the server answers
            return LlmLook("ollama", error="GET /api/ps waits for a model load", silent=True, loading=True)
        return _llm_unread("ollama", e)
    return LlmLook("ollama", models=found)


def _timed_out(error: BaseException) -> bool:
    return isinstance(error, TimeoutError) or (
        isinstance(error, urllib.error.URLError) and isinstance(error.reason, TimeoutError)
    )


def _answers(url: str, timeout: float) -> bool:
    try:
        _get(url, timeout)
    except (OSError, ValueError):
        return False
    return True


def _llamacpp_look(url: str, timeout: float) -> LlmLook:
    """GET /props first: is_sleeping tells whether the model is loaded, and asking it neither wakes a sleeping
    server nor restarts its countdown to sleep (tools/server/server-context.cpp: /props, /health and /models
    answer from the state saved at sleep; /slots is a task that wakes the server, so reading it each tick
    would keep the model in VRAM for ever; /metrics neither wakes it nor restarts the countdown,
    server-queue.cpp task_resets_idle_timer, as conformance.py measured on b10622 and b11434). Where /props
    tells no is_sleeping (a build without --sleep-idle-seconds): GET /slots (tools/server/README.md: a list
    of slots, each with is_processing); where llama-server runs with --no-slots, GET /metrics (only with
    --metrics): the gauges llamacpp:requests_processing and llamacpp:requests_deferred."""
    try:
        props = json.loads(_get(f"{url}/props", timeout))
        if not isinstance(props, dict):
            raise ValueError("/props is not an object")
        if isinstance(props.get("is_sleeping"), bool):
            return LlmLook("llamacpp", awake=not props["is_sleeping"])
    except urllib.error.HTTPError as e:
        if e.code not in _ROUTE_OFF:
            return _llm_unread("llamacpp", e)
    except (OSError, ValueError, TypeError) as e:
        if _timed_out(e) and _answers(f"{url}/health", min(timeout, 2.0)):
            # server-queue.cpp start_loop reloads a sleeping server's model holding mutex_tasks, which
            # is_sleeping() (/props) takes: every route but /health waits for the reload a request asked for
            return LlmLook("llamacpp", error="GET /props waits for the model's reload", silent=True, loading=True)
        return _llm_unread("llamacpp", e)
    try:
        slots = json.loads(_get(f"{url}/slots", timeout))
        if not isinstance(slots, list) or not all(isinstance(s, dict) and "is_processing" in s for s in slots):
            raise ValueError("not a list of slots with is_processing")
        return LlmLook("llamacpp", slots=tuple(bool(s["is_processing"]) for s in slots))
    except urllib.error.HTTPError as e:
        if e.code not in _ROUTE_OFF:
            return _llm_unread("llamacpp", e)
        slots_off = why(e)
    except (OSError, ValueError, TypeError) as e:
        return _llm_unread("llamacpp", e)
    try:
        gauges = prometheus_values(_get(f"{url}/metrics", timeout).decode(errors="replace"))
        requests = gauges["llamacpp:requests_processing"] + gauges.get("llamacpp:requests_deferred", 0.0)
    except urllib.error.HTTPError as e:
        if e.code in _ROUTE_OFF:
            return LlmLook("llamacpp", error=f"/slots off ({slots_off}), /metrics off ({why(e)})")
        return _llm_unread("llamacpp", e)
    except (OSError, ValueError, KeyError) as e:
        return _llm_unread("llamacpp", e)
    return LlmLook("llamacpp", requests=int(requests))


def _get(url: str, timeout: float) -> bytes:
    """The body of a GET; something on the port that does not speak HTTP (http.client's BadStatusLine,
    not an OSError) is a ValueError, an answer of another shape, so it never stops a tick."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return reply.read()
    except http.client.HTTPException as e:
        raise _not_http(e) from None


def _not_http(error: http.client.HTTPException) -> Exception:
    """What a look raises for an answer http.client could not read (BadStatusLine, IncompleteRead: no
    OSError, they would escape the tick): a ValueError, an answer of another shape. RemoteDisconnected
    is a connection reset and stays the OSError it is."""
    return error if isinstance(error, OSError) else ValueError(f"not an HTTP answer ({type(error).__name__})")


def _llm_unread(runtime: str, error: BaseException) -> LlmLook:
    """Why the runtime was not read. Nothing listening on its port (not installed yet, stopped, crashed) can
    run nothing: no trouble. A route that is off tells nothing: no trouble either. Anything else (a timeout, an
    HTTP 5xx, an answer of another shape) comes from a runtime that runs and may be working: silent."""
    refused = isinstance(error, ConnectionRefusedError) or (
        isinstance(error, urllib.error.URLError) and isinstance(error.reason, ConnectionRefusedError)
    )
    route_off = isinstance(error, urllib.error.HTTPError) and error.code in _ROUTE_OFF
    return LlmLook(runtime, error=why(error), silent=not (refused or route_off))


_GO_TIME = re.compile(r"(\d{4}-\d\d-\d\d)[Tt](\d\d:\d\d:\d\d)(?:\.(\d+))?([Zz]|[+-]\d\d:\d\d)")


def go_time(text: object) -> float | None:
    """A unix time from Go's time.Time in JSON (RFC 3339, up to nanoseconds: "2024-06-04T14:38:31.83753-07:00");
    None when it is none. By hand: the VM's python3 may be 3.10, whose fromisoformat takes 3 or 6 digits only."""
    match = _GO_TIME.fullmatch(text) if isinstance(text, str) else None
    if not match:
        return None
    fraction = (match[3] or "")[:6].ljust(6, "0")
    zone = "+00:00" if match[4] in "Zz" else match[4]
    try:
        return datetime.fromisoformat(f"{match[1]}T{match[2]}.{fraction}{zone}").timestamp()
    except (ValueError, OverflowError):
        return None


def prometheus_values(text: str) -> dict[str, float]:
    """Each unlabelled sample of a Prometheus text exposition ("name value" a line, # for comments)."""
    values = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and not fields[0].startswith("#") and "{" not in fields[0]:
            with contextlib.suppress(ValueError):
                values[fields[0]] = float(fields[1])
    return values


def in_a_child(look, seconds: float):
    """look() run in a forked child, its JSON answer read back within `seconds`; None when it took longer,
    OSError when it failed.

    For the reads of the data volume, a network disk: one that hangs blocks the reading task in the
    kernel (D state), where no signal and no Python timeout reaches it, and a tick stuck there would
    never decide again. A child stuck so is left behind (killed, and reaped when it can be): the tick goes
    on and counts the silence as trouble, which is capped. The child keeps no descriptor but its pipe, so
    a child left behind holds no lock of the parent's."""
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, and leave at once without the parent's atexit work
        code = 1
        try:
            os.close(readable)
            os.closerange(3, writable)
            os.closerange(writable + 1, 1 << 16)
            try:
                answer = {"answer": look()}
            except Exception as e:  # said in the parent, as a look that failed
                answer = {"error": f"{type(e).__name__}: {e}"}
            data = json.dumps(answer).encode()
            while data:
                data = data[os.write(writable, data) :]
            code = 0
        finally:
            os._exit(code)
    os.close(writable)
    chunks: list[bytes] = []
    deadline = time.monotonic() + seconds
    try:
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([readable], [], [], left)[0]:
                continue
            chunk = os.read(readable, 1 << 16)
            if not chunk:
                os.waitpid(pid, 0)
                try:
                    said = json.loads(b"".join(chunks) or b'{"error": "the child said nothing"}')
                except ValueError as e:  # cut short (the child killed as it wrote): a look that failed
                    raise OSError(f"the look's answer was cut short: {e}") from None
                if "error" in said:
                    raise OSError(said["error"])
                return said["answer"]
            chunks.append(chunk)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, os.WNOHANG)  # a child in D state dies when its read returns; init reaps it then
        return None
    finally:
        os.close(readable)


def data_volume_problem(mount: str, marker: str) -> str | None:
    """What is wrong with the data volume, in words; None when it is mounted with its marker (a VM
    the cloud booted without gpu-rent may run SwarmUI on the boot disk's empty folders)."""
    if not mount:
        return None
    if not os.path.ismount(mount):
        return f"not mounted at {mount}"
    if not os.path.exists(os.path.join(mount, marker)):
        return f"at {mount} lacks its marker {marker}"
    return None


def unit_starting_since(unit: str, now: float, systemctl: str = "systemctl") -> float | None:
    """Since when (a unix time) a oneshot unit is still starting (ActiveState activating, as systemd shows the
    data volume's boot-time grow while resize2fs runs); None when it is not, or systemd does not say when."""
    try:
        shown = subprocess.run(
            [systemctl, "show", "-p", "ActiveState", "-p", "InactiveExitTimestampMonotonic", unit],
            capture_output=True, text=True, timeout=5, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    fields = dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)
    if fields.get("ActiveState") != "activating":
        return None
    try:  # systemd's CLOCK_MONOTONIC, microseconds: the same clock time.monotonic() reads
        began = int(fields.get("InactiveExitTimestampMonotonic") or 0) / 1e6
    except ValueError:
        began = 0
    # no start told: not taken for a grow, which would restart its clock at each tick and never end
    return now - max(time.monotonic() - began, 0.0) if began else None


def fresh_downloads(dirs: tuple[str, ...], now: float, fresh: float = DOWNLOAD_FRESH_SECONDS) -> tuple[str, ...]:
    """Partial files being written under the model folders, newest first, as paths under their folder."""
    found: list[tuple[float, str]] = []
    for top in dirs:
        for folder, _dirs, files in os.walk(top):
            for name in files:
                if not (name.endswith(".tmp") or _PARTIAL_BLOB.fullmatch(name)):
                    continue
                path = os.path.join(folder, name)
                try:
                    mtime = os.stat(path).st_mtime
                except OSError:
                    continue  # renamed to its final name between the listing and the look
                # a clock ahead (a file copied with its mtime from a laptop) must not keep the VM for ever
                if -FUTURE_SLACK <= now - mtime <= fresh:
                    found.append((mtime, os.path.relpath(path, top)))
    return tuple(p for _, p in sorted(found, reverse=True))


GPU_QUERY = ("--query-gpu=index,utilization.gpu,memory.used", "--format=csv,noheader,nounits")
GPU_TIMEOUT = 15  # nvidia-smi may take seconds to wake a driver without persistence mode


def parse_gpus(text: str) -> tuple[tuple[int, float | None, float | None], ...]:
    """nvidia-smi's CSV (GPU_QUERY): "0, 87, 20321" a GPU per line; "[N/A]" or "[Not Supported]"
    where a GPU does not tell (a MIG slice has no utilisation of its own). ValueError for anything
    else: "No devices were found" or the driver's complaint is no GPU list."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3 or not fields[0].isdigit():
            raise ValueError(_first_line(line))
        gpus.append((int(fields[0]), _reading(fields[1]), _reading(fields[2])))
    return tuple(gpus)


def _reading(field: str) -> float | None:
    if field.startswith("["):  # [N/A], [Not Supported], [Unknown Error]
        return None
    return float(field)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:160]


class GpuReading(NamedTuple):
    gpus: tuple[tuple[int, float | None, float | None], ...] | None  # None: not read
    error: str | None = None  # why not
    absent: bool = False  # no nvidia-smi at all: a VM without NVIDIA's driver, not a broken one


def read_gpus(nvidia_smi: str) -> GpuReading:
    """Every GPU's reading, or why there is none (no nvidia-smi, no driver, no permission, a driver
    and library of two versions after an upgrade, a GPU fallen off the bus)."""
    try:
        code, out, err = run_bounded([nvidia_smi, *GPU_QUERY], GPU_TIMEOUT)
    except FileNotFoundError:
        return GpuReading(None, f"no {nvidia_smi} on PATH", absent=True)
    except OSError as e:
        return GpuReading(None, f"{nvidia_smi}: {e.strerror or e}")
    if code is None:
        return GpuReading(None, f"{nvidia_smi} did not answer in {GPU_TIMEOUT} s")
    if code != 0:  # 6: "No devices were found"; 9: "NVIDIA-SMI has failed because ... driver"
        said = _first_line(out) or _first_line(err) or "no output"
        return GpuReading(None, f"{nvidia_smi} exit {code}: {said}")
    try:
        return GpuReading(parse_gpus(out))
    except ValueError as e:
        return GpuReading(None, f"{nvidia_smi} said: {e}")


def run_bounded(argv: list[str], timeout: float, env: dict | None = None) -> tuple[int | None, str, str]:
    """argv's exit code (None: it ran past timeout), stdout and stderr. In a process group of its own,
    its output in files, not pipes: what it leaves running in the background cannot hold the tick.
    Past the timeout the whole group is killed and waited for a moment only (a process stuck in the
    kernel, nvidia-smi on a GPU fallen off the bus, cannot be ended; the tick goes on without it).
    FileNotFoundError and OSError when argv cannot start."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True, env=env
        )
        try:
            code: int | None = child.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(child.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(2)
            code = None
        out.seek(0)
        err.seek(0)
        return code, out.read().decode(errors="replace"), err.read().decode(errors="replace")


def last_terminal_input(pts_root: str = "/dev/pts") -> tuple[float, str] | None:
    """The newest key typed in any terminal: the atime of /dev/pts/N, which the kernel moves when a
    program reads input from it (every 8 s at most), as `w` and `who -u` read idleness. An SSH tunnel
    (ssh -N, no terminal) has none; output does not move it (that is the mtime)."""
    newest = None
    with contextlib.suppress(OSError):
        for entry in os.scandir(pts_root):
            if not entry.name.isdigit():  # ptmx
                continue
            try:
                st = entry.stat()
            except OSError:
                continue  # closed meanwhile
            if newest is None or st.st_atime > newest[0]:
                newest = (st.st_atime, f"pts/{entry.name} ({_user(st.st_uid)})")
    return newest


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def run_keep_alive(command: str, timeout: float) -> tuple[bool | None, str | None]:
    """KEEP_ALIVE_COMMAND's verdict: (True, None) exit 0, (False, None) another exit code; (None, why)
    when it cannot say: the shell could not run it (126 not executable, 127 not found), a signal
    ended it or the command it ran (128+N, e.g. 137 after the OOM killer), or it ran past the timeout
    (its whole process group is killed then)."""
    if not command:
        return None, None
    try:
        # the command reaches the shell through its environment, not its argv: `pgrep -f train.py`
        # would otherwise find the very shell that runs it, and keep the VM for ever
        code, _out, err = run_bounded(
            ["/bin/sh", "-c", 'eval "$KEEP_ALIVE_COMMAND"'], timeout, env={**os.environ, "KEEP_ALIVE_COMMAND": command}
        )
    except OSError as e:
        return None, f"could not start: {e.strerror or e}"
    if code is None:
        return None, f"ran past its {timeout:.0f} s timeout"
    said = _first_line(err.strip().splitlines()[-1]) if err.strip() else ""
    if code == 0:
        return True, None
    if code in (126, 127):
        return None, f"exit {code}: {said or 'not found or not executable'}"
    if code < 0 or 128 < code <= 128 + 64:
        number = -code if code < 0 else code - 128
        return None, f"ended by signal {_signal_name(number)}" + (f" (exit {code})" if code > 0 else "")
    return False, None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a real-time signal has no name of its own
        return str(number)


def read_time(path: str) -> float | None:
    """A unix time written first in a file (the hold, the seeding lock); None when absent or unreadable."""
    try:
        return float(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_hold(path: str, server_id: str) -> float | None:
    """The hold's time, when it was made for this server (`<unix time> <server id>`, playbooks/hold.yml).

    The hold lives on the data volume, which outlives the server: a hold made for the VM before (ended by
    stop, the killer or the cloud) must not keep tomorrow's VM. A hold without a server id was written by
    a gpu-rent before this rule and is honoured: it ends at its time like any other."""
    try:
        words = Path(path).read_text().split()
        until = float(words[0])
    except (OSError, ValueError, IndexError):
        return None
    return until if len(words) < 2 or words[1] == server_id else None
