"""SwarmUI's HTTP API on loopback as upstream 062407c7 answers it, for unit tests of what reads it
(the idle-killer, the swarmui role's readiness check) in cases the stand-in cannot stage.

src/WebAPI/API.cs: every route is a POST of JSON; GetNewSession needs no session; for every other
route the session is checked before the route: a missing one is HTTP 400 basic_api, an unknown one
HTTP 401 invalid_session_id, then an unknown route HTTP 400 bad_route, each with the JSON error as the
body. GetNewSession answers as BasicAPIFeatures.cs shapes it. A test's subclass answers its routes in
`route`.
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

INVALID_SESSION = {"error": "Invalid session ID. You may need to refresh the page.", "error_id": "invalid_session_id"}


class UpstreamAPI:
    """The server and API.cs's checks; `asked` holds (route, HTTP status) of every request, in order."""

    def __init__(self, version: str = "0.9.8.2"):
        self.version = version
        self.sessions: set[str] = set()
        self.asked: list[tuple[str, int]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                route = self.path.removeprefix("/API/")
                code, answer = api.answer(route, body)
                api.asked.append((route, code))
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def routes_asked(self) -> list[str]:
        return [route for route, _ in self.asked]

    def answer(self, route: str, body: dict) -> tuple[int, dict]:
        if route == "GetNewSession":
            self.sessions.add(session := uuid.uuid4().hex)
            return 200, {"session_id": session, "user_id": "local", "output_append_user": False,
                         "version": self.version, "server_id": "standin", "permissions": ["*"]}  # fmt: skip
        return self.session_refused(body) or self.route(route, body)

    def session_refused(self, body: dict) -> tuple[int, dict] | None:
        if "session_id" not in body:
            return 400, {"error_id": "basic_api", "error": "missing session id"}
        if body["session_id"] not in self.sessions:
            return 401, INVALID_SESSION
        return None

    def route(self, route: str, body: dict) -> tuple[int, dict]:
        return 400, {"error_id": "bad_route", "error": "Unknown API route"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
