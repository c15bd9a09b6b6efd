"""The HTTP server as `ollama serve` runs it: cmd/cmd.go RunServer, server/routes.go Serve and gin's plumbing.

- RunServer listens on OLLAMA_HOST first ("Error: listen tcp <addr>: bind: ..." and exit 1 when it cannot),
  then Serve: blobs/ created, "sha256:" blob names fixed (fixblobs.go), unless OLLAMA_NOPRUNE the unused blobs
  and empty manifest directories pruned (skipped with a warning when a manifest is corrupt), then
  "Listening on <addr> (version X)". SIGINT and SIGTERM end it with status 0.
- allowedHostsMiddleware: on a loopback listener, a request whose Host is not loopback, private, unspecified,
  localhost, the machine's name or *.localhost/.local/.internal gets 403 (its local-interface check is not
  imitated); OPTIONS from an allowed host gets 204.
- gin (HandleMethodNotAllowed): an unknown path is 404 "404 page not found", a known path with another method 405
  "405 method not allowed", both text/plain. c.JSON is application/json; charset=utf-8. streamResponse is
  application/x-ndjson, one JSON object a line, chunked; an error before anything was written is a 500 JSON
  answer, after that a last {"error"} line. Each request gets gin's "[GIN] ..." line on stdout.
- ShouldBindJSON: an empty body is 400 "missing request body"; bad JSON or a field of the wrong type is 400 with
  encoding/json's message (Python's wording for bad JSON).
"""

import contextlib
import errno
import ipaddress
import json
import os
import select
import signal
import socket
import sys
import time
import urllib.parse
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

from . import VERSION, envconfig, manifest
from .gotypes import duration_string, go_json
from .logs import log

JSON = "application/json; charset=utf-8"
NDJSON = "application/x-ndjson"
_GO_KINDS = {bool: "bool", str: "string", int: "number", float: "number", list: "array", dict: "object"}
_PRIVATE = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")]


class BadRequest(Exception):
    """A 400 answer {"error": message}."""


class ClientGone(Exception):
    """The client closed its connection: the request's context is cancelled."""


def go_kind(value) -> str:
    return "null" if value is None else _GO_KINDS.get(type(value), "object")


class Stream:
    """streamResponse: NDJSON lines, chunked; the first line sends the headers."""

    def __init__(self, ctx: "Ctx", content_type: str = NDJSON):
        self.ctx, self.content_type, self.started = ctx, content_type, False

    def send(self, obj) -> None:
        h = self.ctx.handler
        try:
            if not self.started:
                self.started = True
                h.send_response(200)
                h.send_header("Content-Type", self.content_type)
                h.send_header("Transfer-Encoding", "chunked")
                h.end_headers()
            data = go_json(obj) + b"\n"
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()
        except OSError:
            h.close_connection = True
            raise ClientGone() from None

    def error(self, message: str) -> None:
        if not self.started:
            self.ctx.json(500, {"error": message}, content_type="application/json")
            return
        with contextlib.suppress(ClientGone):
            self.send({"error": message})

    def end(self) -> None:
        if self.started:
            try:
                self.ctx.handler.wfile.write(b"0\r\n\r\n")
                self.ctx.handler.wfile.flush()
            except OSError:
                self.ctx.handler.close_connection = True


class Ctx:
    """What a route handler gets, as gin.Context."""

    def __init__(self, handler: "Handler", body: bytes):
        self.handler, self.body, self.method = handler, body, handler.command

    def send(self, code: int, body: bytes, content_type: str | None = None) -> None:
        h = self.handler
        h.send_response(code)
        if content_type:
            h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if self.method != "HEAD":
            h.wfile.write(body)

    def json(self, code: int, obj, content_type: str = JSON) -> None:
        self.send(code, go_json(obj), content_type)

    def bind(self, struct: str, fields: dict[str, str]) -> dict:
        """ShouldBindJSON into api.<struct>: fields maps each JSON name to its Go type."""
        if not self.body.strip():
            raise BadRequest("missing request body")
        try:
            data = json.loads(self.body)
        except ValueError as e:
            raise BadRequest(str(e)) from None
        if not isinstance(data, dict):
            raise BadRequest(f"json: cannot unmarshal {go_kind(data)} into Go value of type api.{struct}")
        for key, gotype in fields.items():
            value = data.get(key)
            if value is None:
                continue
            ok = {"string": isinstance(value, str), "bool": isinstance(value, bool),
                  "int": isinstance(value, int) and not isinstance(value, bool),
                  "map[string]interface {}": isinstance(value, dict),
                  "[]api.Message": isinstance(value, list)}  # fmt: skip
            if not ok.get(gotype, True):
                raise BadRequest(f"json: cannot unmarshal {go_kind(value)} into Go struct field {struct}.{key} "
                                 f"of type {gotype}")  # fmt: skip
        return data

    def client_gone(self) -> bool:
        """The request context is done: the client closed its side."""
        sock = self.handler.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


def _host_allowed(host_header: str) -> bool:
    try:
        name, _ = envconfig.split_host_port(host_header)
    except ValueError:
        name = host_header
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        ip = None
    if ip is not None:
        return ip.is_loopback or ip.is_unspecified or any(ip in net for net in _PRIVATE if net.version == ip.version)
    name = name.lower()
    if name in ("", "localhost") or name == socket.gethostname().lower():
        return True
    return name.endswith((".localhost", ".local", ".internal"))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    routes: ClassVar[dict[str, dict]] = {}
    not_imitated: ClassVar[list[tuple[str, str]]] = []
    loopback = True

    def send_response(self, code, message=None):  # gin sends no Server header
        self._status = code
        self.send_response_only(code, message)
        self.send_header("Date", self.date_time_string())

    def log_message(self, fmt, *args):  # gin's logger writes the request lines
        pass

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline().strip():
                pass
            return body
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _dispatch(self):
        started, self._status = time.monotonic_ns(), 0
        ctx = Ctx(self, self._read_body())
        path = urllib.parse.urlsplit(self.path).path
        try:
            if self.loopback and not _host_allowed(self.headers.get("Host", "")):
                return ctx.send(403, b"")
            if self.command == "OPTIONS":
                return ctx.send(204, b"")
            methods = self.routes.get(path)
            if methods is None:  # upstream routes the stand-in leaves out
                methods = {method: None for method, route in self.not_imitated if path == route
                           or (route.endswith("/") and path.startswith(route) and path != route)}  # fmt: skip
            if not methods:
                return ctx.send(404, b"404 page not found", "text/plain")
            if self.command not in methods:
                return ctx.send(405, b"405 method not allowed", "text/plain")
            route = methods[self.command]
            if route is None:
                return ctx.json(501, {"error": f"the Ollama stand-in does not imitate {self.command} {path}"})
            try:
                route(ctx)
            except BadRequest as e:
                ctx.json(400, {"error": str(e)})
            except ClientGone:
                self.close_connection = True
        finally:
            latency = duration_string(time.monotonic_ns() - started)
            stamp = datetime.now().strftime("%Y/%m/%d - %H:%M:%S")
            sys.stdout.write(f"[GIN] {stamp} | {self._status:3d} | {latency:>13} | {self.client_address[0]:>15} | "
                             f"{self.command:<7} {go_json(path).decode()}\n")  # fmt: skip
            sys.stdout.flush()

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _dispatch


def listen(hostport: str) -> socket.socket:
    """net.Listen("tcp", host:port): an empty host is every address (IPv6 and IPv4), a name its first IPv4."""
    host, port = envconfig.split_host_port(hostport)
    if host == "":
        family, address = socket.AF_INET6, ("::", int(port))
    elif ":" in host:
        family, address = socket.AF_INET6, (host, int(port))
    else:
        infos = socket.getaddrinfo(host, int(port), socket.AF_UNSPEC, socket.SOCK_STREAM)
        infos.sort(key=lambda info: info[0] != socket.AF_INET)
        family, address = infos[0][0], infos[0][4]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go's listeners
    if host == "":
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    try:
        sock.bind(address)
        sock.listen(512)
    except OSError:
        sock.close()
        raise
    return sock


def _addr(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return envconfig.join_host_port(host, str(port))


def serve() -> int:
    from . import routes

    url = envconfig.host()
    try:
        sock = listen(url.host)
    except OSError as e:
        reason = os.strerror(e.errno).lower() if e.errno else str(e)
        op = "bind" if e.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL) else "dial"
        print(f"Error: listen tcp {url.host}: {op}: {reason}", file=sys.stderr)
        return 1
    except (ValueError, socket.gaierror) as e:
        print(f"Error: listen tcp {url.host}: {e}", file=sys.stderr)
        return 1
    blobs = manifest.blobs_path()
    manifest.fix_blobs(blobs)
    if not envconfig.no_prune():
        try:
            manifest.all_manifests(continue_on_error=False)
        except (OSError, ValueError) as e:
            log("WARN", "corrupt manifests detected, skipping prune operation.  Re-pull or delete to clear", error=e)
        else:
            manifest.prune_layers()
            manifest.prune_directory(manifest.manifests_path())
    app = routes.App()
    Handler.routes, Handler.not_imitated = app.routes(), routes.NOT_IMITATED
    local = sock.getsockname()[0]
    Handler.loopback = ipaddress.ip_address(local.split("%")[0]).is_loopback
    server = ThreadingHTTPServer(sock.getsockname()[:2], Handler, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.daemon_threads = True
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: (sys.stdout.flush(), sys.stderr.flush(), os._exit(0)))
    log("INFO", f"Listening on {_addr(sock)} (version {VERSION})")
    server.serve_forever()
    return 0
