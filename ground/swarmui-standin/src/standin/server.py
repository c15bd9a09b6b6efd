"""SwarmUI stand-in server: SwarmUI's API shapes, nothing invented.

Shapes follow shared/research/swarmui-api.md (GetNewSession, GetGlobalStatus,
GetCurrentStatus, ListBackends, BackendHandler's aggregate status). Python
stdlib only: the target host has python3 and nothing else is installed for it.
"""

import argparse
import base64
import hashlib
import json
import os
import re
import struct
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

VERSION = "0.9.7.0-standin"
ROOT = Path(__file__).resolve().parents[2]
BACKEND_START_SECONDS = float(os.environ.get("STANDIN_BACKEND_START_SECONDS", "2"))
# A self-started ComfyUI backend listens from Network.BackendStartingPort (7820) on.
COMFY_PORT = int(os.environ.get("STANDIN_COMFY_PORT", "7821"))


def parse_fds(text: str) -> dict:
    """SwarmUI's FDS files: `key: value` lines, sections nested by indentation."""
    root: dict = {}
    stack = [(-1, root)]
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip())
        key, _, value = raw.strip().partition(":")
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        value = value.strip()
        if value:
            parent[key.strip()] = value.strip('"')
        else:
            parent[key.strip()] = {}
            stack.append((indent, parent[key.strip()]))
    return root


class Backend:
    def __init__(self, backend_id: int, section: dict):
        self.id = backend_id
        self.type = section.get("type", "comfyui_selfstart")
        self.title = section.get("title", "")
        self.enabled = section.get("enabled", "true").lower() == "true"
        self.settings = section.get("settings", {})
        self.started = time.monotonic()
        self.last_release: float | None = None

    def status(self) -> str:
        if not self.enabled:
            return "disabled"
        script = self.settings.get("StartScript", "")
        if self.type == "comfyui_selfstart" and not (ROOT / script).is_file():
            return "errored"
        if time.monotonic() - self.started < BACKEND_START_SECONDS:
            return "loading"
        return "running"

    def to_net(self) -> dict:
        since = 0 if self.last_release is None else int(time.monotonic() - self.last_release)
        return {
            "type": self.type,
            "status": self.status(),
            "id": self.id,
            "settings": self.settings,
            "modcount": 0,
            "features": ["comfyui"] if self.status() == "running" else [],
            "enabled": self.enabled,
            "title": self.title,
            "max_usages": 1,
            "seconds_since_used": since,
            "time_since_used": "Never" if self.last_release is None else f"{since} seconds ago",
            "can_load_models": True,
        }


class Swarm:
    def __init__(self, data_dir: Path, backends_file: Path, settings_file: Path):
        self.data_dir = data_dir
        self.settings = parse_fds(settings_file.read_text()) if settings_file.is_file() else {}
        sections = parse_fds(backends_file.read_text()) if backends_file.is_file() else {}
        self.backends = [Backend(int(k) if k.isdigit() else i, v) for i, (k, v) in enumerate(sections.items())]
        self.server_id = str(uuid.uuid4())
        self.sessions: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.comfy_queue: list[str] = []

    def new_session(self) -> dict:
        session_id = uuid.uuid4().hex.upper()
        with self.lock:
            self.sessions[session_id] = {"waiting_gens": 0, "live_gens": 0, "loading_models": 0, "waiting_backends": 0}
        return {
            "session_id": session_id,
            "user_id": "local",
            "output_append_user": True,
            "version": VERSION,
            "server_id": self.server_id,
            "permissions": ["*"],
        }

    def backend_status(self) -> dict:
        """BackendHandler.CurrentBackendStatus, in its order of precedence."""
        states = [b.status() for b in self.backends]
        if not states:
            return _status("empty", "error", "No backends are configured.")
        if all(s == "disabled" for s in states):
            return _status("all_disabled", "error", "All backends are disabled.")
        if "errored" in states:
            return _status("errored", "error", "Some backends have errored on the server.")
        if "running" in states:
            if "loading" in states:
                return _status("some_loading", "warn", "Some backends are still loading.", True)
            return _status("running", "", "")
        if "loading" in states:
            return _status("loading", "soft", "Backends are still loading on the server...", True)
        return _status("idle", "warn", "All backends are idle. Cannot generate until at least one backend is running.")

    def counters(self, session_id: str | None = None) -> dict:
        with self.lock:
            sessions = [self.sessions[session_id]] if session_id else list(self.sessions.values())
            return {
                k: sum(s[k] for s in sessions)
                for k in ("waiting_gens", "loading_models", "waiting_backends", "live_gens")
            }

    def queue_generation(self, session_id: str, seconds: float, count: int) -> None:
        counters = self.sessions[session_id]
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
                for backend in self.backends:
                    backend.last_release = time.monotonic()
                self._write_output()

        threading.Thread(target=work, daemon=True).start()

    def comfy_prompts(self, count: int, seconds: float) -> None:
        """Prompts sent to ComfyUI directly (the Comfy Workflow tab): SwarmUI's counters do not see them."""
        with self.lock:
            self.comfy_queue += [str(uuid.uuid4()) for _ in range(count)]

        def work():
            for _ in range(count):
                time.sleep(seconds)
                with self.lock:
                    self.comfy_queue.pop(0)

        threading.Thread(target=work, daemon=True).start()

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


def _status(status: str, css: str, message: str, loading: bool = False) -> dict:
    return {"status": status, "class": css, "message": message, "any_loading": loading}


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

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj: dict, code: int = 200) -> None:
        self._send(code, json.dumps(obj).encode())

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
        if self.path == "/StandinTest/EchoWS" and self.headers.get("Upgrade", "").lower() == "websocket":
            return self._websocket_echo()
        if self.path in ("/", "/Text2Image"):
            installed = self.swarm.settings.get("IsInstalled", "false").lower() == "true"
            self._send(200, PAGE % (VERSION.encode() if installed else b"(not installed)"), "text/html")
        else:
            self._send(404, b"404 not found", "text/plain")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self._json({"error": "Request body was not valid JSON."}, 400)
        route = self.path.split("?")[0]
        swarm = self.swarm
        if route == "/API/GetNewSession":
            return self._json(swarm.new_session())
        if route.startswith("/API/") or route.startswith("/StandinTest/"):
            session_id = body.get("session_id")
            if session_id not in swarm.sessions:
                return self._json(
                    {"error_id": "invalid_session_id", "error": "Invalid session ID. You may need to refresh the page."}
                )
            if route == "/API/GetGlobalStatus":
                return self._json({"status": swarm.counters(), "backend_status": swarm.backend_status(),
                                   "supported_features": ["comfyui"]})  # fmt: skip
            if route == "/API/GetCurrentStatus":
                return self._json({"status": swarm.counters(session_id), "backend_status": swarm.backend_status(),
                                   "supported_features": ["comfyui"]})  # fmt: skip
            if route == "/API/ListBackends":
                full = bool(body.get("full_data"))
                nets = {str(b.id): b.to_net() | ({"current_model": None} if full else {}) for b in swarm.backends}
                return self._json(nets)
            if route == "/StandinTest/QueueGeneration":
                swarm.queue_generation(session_id, float(body.get("seconds", 5)), int(body.get("count", 1)))
                return self._json({"success": True})
            if route == "/StandinTest/DownloadModel":
                name = re.sub(r"[^\w.-]", "_", body.get("name", "model"))
                folder = re.sub(r"[^\w.-]", "_", body.get("folder", "Stable-Diffusion"))
                swarm.download_model(name, folder, float(body.get("seconds", 5)), int(body.get("bytes", 1 << 20)))
                return self._json({"success": True})
            if route == "/StandinTest/ComfyQueue":
                swarm.comfy_prompts(int(body.get("count", 1)), float(body.get("seconds", 5)))
                return self._json({"success": True})
            if route == "/StandinTest/Restart":
                self._json({"success": True})
                threading.Timer(0.2, lambda: os._exit(42)).start()
                return None
            return self._json({"error": f"Unknown API route '{route[5:]}'."}, 404)
        return self._send(404, b"404 not found", "text/plain")


class ComfyHandler(BaseHTTPRequestHandler):
    """ComfyUI's GET /queue: [number, prompt_id, prompt, extra, outputs] items, running then pending."""

    swarm: Swarm

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        if self.path.split("?")[0] != "/queue":
            self.send_response(404)
            self.end_headers()
            return
        with self.swarm.lock:
            items = [[n, pid, {}, {}, []] for n, pid in enumerate(self.swarm.comfy_queue)]
        body = json.dumps({"queue_running": items[:1], "queue_pending": items[1:]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--port", type=int, default=7801)
    parser.add_argument("--data_dir", default="Data")
    parser.add_argument("--settings_file")
    parser.add_argument("--backends_file")
    parser.add_argument("--launch_mode", default="webinstall")
    args, _ = parser.parse_known_args()  # SwarmUI accepts many more; ignore them
    os.chdir(ROOT)
    data = ROOT / args.data_dir
    settings_file = Path(args.settings_file) if args.settings_file else data / "Settings.fds"
    backends_file = Path(args.backends_file) if args.backends_file else data / "Backends.fds"
    Handler.swarm = Swarm(data, backends_file, settings_file)
    host = "127.0.0.1" if args.host == "localhost" else args.host
    server = ThreadingHTTPServer((host, args.port), Handler)
    if any(b.type == "comfyui_selfstart" and b.enabled for b in Handler.swarm.backends):
        ComfyHandler.swarm = Handler.swarm
        try:
            comfy = ThreadingHTTPServer(("127.0.0.1", COMFY_PORT), ComfyHandler)
            threading.Thread(target=comfy.serve_forever, daemon=True).start()
        except OSError as e:  # a real self-started ComfyUI would take the next port; the stand-in goes without
            print(f"ComfyUI queue not served on {COMFY_PORT}: {e}", flush=True)
    print(f"SwarmUI stand-in {VERSION} listening on http://{host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
