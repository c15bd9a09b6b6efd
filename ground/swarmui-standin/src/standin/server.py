"""SwarmUI stand-in server: what upstream SwarmUI 062407c7 (0.9.8.2) answers, nothing invented.

Start order as src/Core/Program.cs: settings, PrepExtensions (extensions.py: each extension built
before the server listens), sessions (sessions.py), backends (backends.py: self-started ComfyUI
processes), then the web server. Python stdlib only: the target host has python3 and nothing else.

- src/WebAPI/API.cs HandleAsyncRequest: the API's errors and their HTTP codes; the session is
  checked before the route;
- src/WebAPI/BasicAPIFeatures.cs: GetNewSession, GetCurrentStatus (this session's counters);
  src/WebAPI/AdminAPI.cs GetGlobalStatus (every session's); src/WebAPI/BackendAPI.cs ListBackends,
  RestartBackends;
- Exit code 42 means "restart me" (Program.RequestRestart), as launch-linux.sh expects.

Test hooks live outside /API/ so they cannot be mistaken for SwarmUI's (they take a session as the
API does): POST /StandinTest/QueueGeneration {"seconds", "count"}, /StandinTest/DownloadModel
{"name", "folder", "seconds", "bytes"}, /StandinTest/ComfyQueue {"count", "seconds"} (forwarded to
the first running self-started ComfyUI's POST /standin_test/queue), /StandinTest/Restart (exit 42);
GET /StandinTest/EchoWS is a WebSocket echo.
"""

import argparse
import base64
import hashlib
import json
import os
import re
import signal
import struct
import sys
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from backends import BackendHandler, ComfyUISelfStartBackend, port_taken
from fds import parse_fds, section
from logs import log
from sessions import COUNTERS, Session, SessionHandler

try:
    from extensions import prep_extensions  # ExtensionsManager.PrepExtensions
except ImportError:  # an older checkout without it: no extensions are built
    prep_extensions = None

# src/SwarmUI.csproj <Version>: Utilities.Version, which GetNewSession answers (Utilities.VaryID)
VERSION = "0.9.8.2"
ROOT = Path(__file__).resolve().parents[2]


class Swarm:
    def __init__(self, data_dir: Path, settings: dict, backends_file: Path, persist: bool, user_id: str):
        self.data_dir = data_dir
        self.settings = settings
        self.server_id = str(uuid.uuid4())  # Utilities.LoopPreventionID, new at every start
        self.sessions = SessionHandler(data_dir, persist, user_id)
        self.backends = BackendHandler(backends_file, data_dir, settings, log)
        self.lock = threading.Lock()

    def counters(self, sessions: list[Session]) -> dict:
        with self.lock:
            return {k: sum(s.counters[k] for s in sessions) for k in COUNTERS}

    def status(self, sessions: list[Session]) -> dict:
        return {"status": self.counters(sessions), "backend_status": self.backends.current_status(),
                "supported_features": self.backends.supported_features()}  # fmt: skip

    def queue_generation(self, session: Session, seconds: float, count: int) -> None:
        counters = session.counters
        with self.lock:
            counters["waiting_gens"] += count

        def work():
            for _ in range(count):
                with self.lock:
                    counters["waiting_gens"] -= 1
                    counters["live_gens"] += 1
                time.sleep(seconds)
                with self.lock:
                    counters["live_gens"] -= 1
                for backend in self.backends.all():
                    backend.time_last_release = time.monotonic()
                self._write_output()

        threading.Thread(target=work, daemon=True).start()

    def comfy_prompts(self, count: int, seconds: float) -> dict:
        """Prompts sent to ComfyUI directly (the Comfy Workflow tab): SwarmUI's counters do not see them."""
        for backend in self.backends.all():
            if isinstance(backend, ComfyUISelfStartBackend) and backend.status == "running":
                body = json.dumps({"count": count, "seconds": seconds}).encode()
                request = urllib.request.Request(f"{backend.api_address()}/standin_test/queue", body,
                                                 {"Content-Type": "application/json"})  # fmt: skip
                with urllib.request.urlopen(request, timeout=10) as reply:
                    reply.read()
                return {"success": True, "backend": backend.id, "port": backend.port}
        return {"error": "No self-started ComfyUI backend is running."}

    def _write_output(self) -> None:
        folder = ROOT / "Output" / "local" / "raw" / time.strftime("%Y-%m-%d")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{time.strftime('%H%M%S')}-{uuid.uuid4().hex[:6]}.png").write_bytes(b"\x89PNG\r\n\x1a\n")

    def download_model(self, name: str, folder: str, seconds: float, size: int) -> None:
        target_dir = ROOT / "Models" / folder
        target_dir.mkdir(parents=True, exist_ok=True)
        tmp = target_dir / f"{name}.download.tmp"

        def work():
            steps = max(1, int(seconds * 4))
            with open(tmp, "wb") as f:
                for _ in range(steps):
                    f.write(b"\0" * (size // steps))
                    f.flush()
                    time.sleep(seconds / steps)
            tmp.rename(target_dir / f"{name}.safetensors")

        threading.Thread(target=work, daemon=True).start()


def _bool(value) -> bool:
    return value.strip().lower() == "true" if isinstance(value, str) else bool(value)


def get_new_session(swarm: Swarm, handler, session, body) -> dict:
    session = swarm.sessions.create_session(handler.client_address[0])
    return {
        "session_id": session.id,
        "user_id": session.user_id,
        "output_append_user": _bool(section(swarm.settings, "Paths").get("AppendUserNameToOutputPath", "true")),
        "version": VERSION,
        "server_id": swarm.server_id,
        "permissions": session.permissions,
    }


def list_backends(swarm: Swarm, handler, session, body) -> dict:
    full = _bool(body.get("full_data", False))
    return {str(b.id): b.to_net(full) for b in swarm.backends.all()}


def restart_backends(swarm: Swarm, handler, session, body) -> dict:
    log.warning(f"User {session.user_id} requested restart of backend {body.get('backend', 'all')}.")
    count = swarm.backends.restart(str(body.get("backend", "all")))
    return {"result": "Success.", "count": count}


def queue_generation(swarm: Swarm, handler, session, body) -> dict:
    swarm.queue_generation(session, float(body.get("seconds", 5)), int(body.get("count", 1)))
    return {"success": True}


def download_model(swarm: Swarm, handler, session, body) -> dict:
    name = re.sub(r"[^\w.-]", "_", body.get("name", "model"))
    folder = re.sub(r"[^\w.-]", "_", body.get("folder", "Stable-Diffusion"))
    swarm.download_model(name, folder, float(body.get("seconds", 5)), int(body.get("bytes", 1 << 20)))
    return {"success": True}


def restart(swarm: Swarm, handler, session, body) -> dict:
    threading.Timer(0.2, shutdown, (swarm, 42)).start()
    return {"success": True}


# API.APIHandlers (lower-cased names) -> (handler, permission); SessionlessRoutes need no session
API_ROUTES = {
    "getnewsession": (get_new_session, None),
    "getcurrentstatus": (lambda s, h, session, b: s.status([session]), "fundamental_generate_tab_access"),
    "getglobalstatus": (lambda s, h, session, b: s.status(s.sessions.all()), "read_server_info_panels"),
    "listbackends": (list_backends, "view_backends_list"),
    "restartbackends": (restart_backends, "restart_backends"),
}
SESSIONLESS_ROUTES = {"login", "getnewsession", "registerbasic", "registeroauth"}
TEST_ROUTES = {
    "queuegeneration": (queue_generation, None),
    "downloadmodel": (download_model, None),
    "comfyqueue": (lambda s, h, session, b: s.comfy_prompts(int(b.get("count", 1)), float(b.get("seconds", 5))), None),
    "restart": (restart, None),
}


def error_obj(message: str, error_id: str) -> dict:
    """Utilities.ErrorObj: "error" first."""
    return {"error": message, "error_id": error_id}


def api_error(error_id: str, message: str) -> tuple[int, dict]:
    """API.cs's Error(..., jsonErrorId, jsonErrorMessage): HTTP 400, "error_id" first."""
    return 400, {"error_id": error_id, "error": message}


def is_json_content_type(value: str | None) -> bool:
    """HttpRequest.HasJsonContentType: application/json or a +json media type, any parameters."""
    media = (value or "").split(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def handle_api(swarm: Swarm, handler, path: str, routes: dict, raw: bytes | None) -> tuple[int, dict]:
    """API.cs HandleAsyncRequest for a POST: content checks, then the session, then the route."""
    if not is_json_content_type(handler.headers.get("Content-Type")):
        return api_error("basic_api", "Wrong content type")
    if not raw:
        return api_error("basic_api", "bad content length")
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):  # JObject.Parse throws: caught as an internal error
        return api_error("internal_error", "An internal error occurred")
    session = None
    if path not in SESSIONLESS_ROUTES:
        session_id = body.get("session_id", handler.headers.get("X-Session-ID"))
        if "session_id" not in body and session_id is None:
            return api_error("basic_api", "missing session id")
        session_id = "" if session_id is None else session_id
        session_id = json.dumps(session_id) if not isinstance(session_id, str) else session_id
        session = swarm.sessions.try_get_session(session_id)
        if session is None:
            log.error(
                f"[WebAPI] Error handling API request '{handler.path}': Request input has unknown session id"
                " (if you're not writing API code you can ignore this message)"
            )
            return 401, error_obj("Invalid session ID. You may need to refresh the page.", "invalid_session_id")
    if path not in routes:
        return api_error("bad_route", "Unknown API route")
    call, permission = routes[path]
    if session is not None and permission and "*" not in session.permissions and permission not in session.permissions:
        return api_error("bad_permissions", "You lack permissions for this route.")
    try:
        output = call(swarm, handler, session, body)
    except Exception as e:  # API.cs answers any exception so
        log.error(f"[WebAPI] Error handling API request '{handler.path}': Internal exception: {e}")
        return api_error("internal_error", "An internal error occurred")
    if output is None:
        return api_error("no_result", "API call did not return any output")
    return 200, output


PAGE = b"""<!DOCTYPE html><html><head><title>SwarmUI</title></head>
<body><h1>SwarmUI</h1><p>Test-ground stand-in %s</p></body></html>"""
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 1.3


def ws_read(rfile) -> tuple[int, bytes] | None:
    """One client frame (opcode, unmasked payload); None when the connection ends."""
    head = rfile.read(2)
    if len(head) < 2:
        return None
    opcode, length = head[0] & 0x0F, head[1] & 0x7F
    if length == 126:
        length = struct.unpack(">H", rfile.read(2))[0]
    elif length == 127:
        length = struct.unpack(">Q", rfile.read(8))[0]
    mask = rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
    data = rfile.read(length)
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def ws_frame(opcode: int, payload: bytes) -> bytes:
    n = len(payload)
    size = bytes([n]) if n < 126 else b"\x7e" + struct.pack(">H", n) if n < 65536 else b"\x7f" + struct.pack(">Q", n)
    return bytes([0x80 | opcode]) + size + payload


class Handler(BaseHTTPRequestHandler):
    swarm: Swarm
    server_version = "Kestrel"
    sys_version = ""
    disable_nagle_algorithm = True  # as Kestrel does

    def log_message(self, fmt, *args):  # journal gets one line per request
        sys.stderr.write(f"{self.command} {self.path}\n")

    def _send(self, code: int, body: bytes, content_type: str = "application/json", headers=()) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _websocket_echo(self) -> None:
        """A WebSocket that echoes every message (SwarmUI's *WS routes are WebSockets; this one tests the path)."""
        key = self.headers.get("Sec-WebSocket-Key", "").encode()
        self.protocol_version = "HTTP/1.1"  # an upgrade is HTTP/1.1 only
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(key + WS_GUID).digest()).decode())
        self.end_headers()
        self.close_connection = True
        while (frame := ws_read(self.rfile)) is not None:
            opcode, payload = frame
            if opcode == 8:  # close: answer it and end
                self.wfile.write(ws_frame(8, payload[:2]))
                return
            if opcode == 9:  # ping
                self.wfile.write(ws_frame(10, payload))
            elif opcode in (1, 2):
                self.wfile.write(ws_frame(opcode, payload))

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/StandinTest/EchoWS" and self.headers.get("Upgrade", "").lower() == "websocket":
            return self._websocket_echo()
        if path.lower().startswith("/api/"):  # API.cs: "Invalid request method", redirected
            return self._send(302, b"", "text/plain", [("Location", "/Error/NoGetAPI")])
        if path == "/":
            return self._send(302, b"", "text/plain", [("Location", "Text2Image")])
        if path == "/Text2Image":
            installed = _bool(self.swarm.settings.get("IsInstalled", "false"))
            return self._send(200, PAGE % (VERSION.encode() if installed else b"(not installed)"), "text/html")
        return self._send(404, b"404 not found", "text/plain")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else None
        path = self.path.split("?")[0]
        if path.lower().startswith("/api/"):
            code, obj = handle_api(self.swarm, self, path.lower()[len("/api/") :], API_ROUTES, raw)
        elif path.lower().startswith("/standintest/"):
            code, obj = handle_api(self.swarm, self, path.lower()[len("/standintest/") :], TEST_ROUTES, raw)
        else:
            return self._send(404, b"404 not found", "text/plain")
        self._send(code, json.dumps(obj).encode(), headers=[("Cache-Control", "no-store")])


def shutdown(swarm: Swarm, code: int) -> None:
    """Program.Shutdown: the backends (and their ComfyUI processes) first, then exit with the code."""
    log.info("Shutting down...")
    swarm.backends.shutdown()
    sys.stdout.flush()
    os._exit(code)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--data_dir", default="Data")
    parser.add_argument("--settings_file")
    parser.add_argument("--backends_file")
    parser.add_argument("--launch_mode", default="webinstall")
    parser.add_argument("--user_id", default="local")
    parser.add_argument("--no_persist", default="false")
    args, _ = parser.parse_known_args()  # SwarmUI accepts many more; ignore them
    os.chdir(ROOT)
    data = (ROOT / args.data_dir).resolve()
    settings_file = Path(args.settings_file) if args.settings_file else data / "Settings.fds"
    settings = parse_fds(settings_file.read_text()) if settings_file.is_file() else {}
    network = section(settings, "Network")
    if prep_extensions is not None:
        prep_extensions(ROOT, log)
    backends_file = Path(args.backends_file) if args.backends_file else data / "Backends.fds"
    swarm = Swarm(data, settings, backends_file, not _bool(args.no_persist), args.user_id)
    Handler.swarm = swarm
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # ComfyUI processes never outlive the server
        signal.signal(sig, lambda *_: shutdown(swarm, 0))
    try:
        swarm.backends.load()
        host = args.host or network.get("Host", "localhost")
        port = args.port or int(network.get("Port", 7801))
        if _bool(network.get("PortCanChange", "true")):  # Program.ApplyCommandLineSettings
            original = port
            while port_taken(port):
                port += 1
            if port != original:
                log.init(f"Port {original} was taken, using {port} instead.")
        bind = "127.0.0.1" if host == "localhost" else "0.0.0.0" if host in ("*", "0.0.0.0") else host
        server = ThreadingHTTPServer((bind, port), Handler)
        server.daemon_threads = True
        log.init(f"SwarmUI stand-in v{VERSION} is now running on http://{host}:{port}")
        server.serve_forever()
    finally:
        shutdown(swarm, 1)


if __name__ == "__main__":
    main()
