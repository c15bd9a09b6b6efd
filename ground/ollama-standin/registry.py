"""Registry stand-in: what registry.ollama.ai answers to a pull, served from a directory; and a tiny model to put in it.

The directory: <dir>/manifests/<namespace>/<model>/<tag> (a manifest, served byte for byte) and
<dir>/blobs/sha256-<hex>. What upstream's server/images.go and server/download.go ask of a registry:

- GET /v2/<namespace>/<model>/manifests/<tag>: the manifest (application/vnd.docker.distribution.manifest.v2+json);
  404 with the Docker registry's error body when there is none.
- HEAD /v2/<namespace>/<model>/blobs/<digest>: 200 and the Content-Length; 404 when there is none.
- GET /v2/<namespace>/<model>/blobs/<digest>: where the bytes are, in a Location header (/cdn/blobs/<digest>), and no
  body. registry.ollama.ai redirects (307) to a CDN on another host, which one loopback address cannot do; a 200
  with a Location is what the registry of upstream's own test (server/images_test.go
  TestPullModelDuplicateDigestVerifiesBlob) answers, and upstream takes either. With --direct-blobs the registry
  serves the bytes itself with no Location, as distribution's registry:2 with redirects off does: upstream fails
  on that ("http: no Location header in response").
- GET /cdn/blobs/<digest>: the bytes, a Range answered with 206, throttled to bytes_per_second per response.
- A TLS hello gets a plain-HTTP 400, as a Go HTTP server answers one.

Test hooks live outside /v2/ so they cannot be taken for the registry's: GET /standin/stats (each request with its
method, path, range, status and the blob bytes it sent; blob_bytes, their sum) and POST /standin/throttle
{"bytes_per_second": N} (0: as fast as it goes).

    python3 registry.py serve --dir DIR --port PORT [--bytes-per-second N] [--direct-blobs]
    python3 registry.py write-model --dir DIR [--name library/tiny:latest] [--size BYTES] [--corrupt]
"""

import argparse
import hashlib
import json
import os
import re
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_MEDIA_TYPE = "application/vnd.docker.container.image.v1+json"  # server/create.go createConfigLayer
ROUTE = re.compile(r"^/v2/(?P<repo>[^/]+/[^/]+)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)$")
CDN = re.compile(r"^/cdn/blobs/(?P<digest>sha256:[0-9a-f]{64})$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
GGUF_STRING, GGUF_UINT32 = 8, 4  # GGUF value types


def gguf_header(name: str) -> bytes:
    """A GGUF v3 header with no tensors, only what upstream's model list and show read (llama, Q4_K_M)."""
    kv = [("general.architecture", GGUF_STRING, "llama"), ("general.name", GGUF_STRING, name),
          ("general.file_type", GGUF_UINT32, 15), ("llama.context_length", GGUF_UINT32, 2048),
          ("llama.embedding_length", GGUF_UINT32, 64), ("llama.block_count", GGUF_UINT32, 1)]  # fmt: skip
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv))
    for key, kind, value in kv:
        out += struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", kind)
        if kind == GGUF_STRING:
            out += struct.pack("<Q", len(value.encode())) + value.encode()
        else:
            out += struct.pack("<I", value)
    return out


def _put_blob(blobs: Path, data: bytes, size: int | None = None) -> dict:
    """Writes data, padded with zeros (a sparse file) to size; returns its digest and size."""
    size = len(data) if size is None else max(size, len(data))
    sha = hashlib.sha256(data)
    zeros, left = bytes(1 << 20), size - len(data)
    while left > 0:
        sha.update(zeros[: min(left, len(zeros))])
        left -= len(zeros)
    digest = f"sha256:{sha.hexdigest()}"
    with open(blobs / f"sha256-{sha.hexdigest()}", "wb") as f:
        f.write(data)
        f.truncate(size)
    return {"digest": digest, "size": size}


def write_model(directory: str | Path, name: str = "library/tiny:latest", size: int = 1 << 20,
                corrupt: bool = False) -> dict:  # fmt: skip
    """A model as registry.ollama.ai serves one: a GGUF model blob of `size` bytes, a template and a config
    (both as upstream's create.go writes them), and the manifest naming them with their sha256 digests and sizes.
    corrupt: the model blob's last byte changed after its digest was taken. Returns the manifest and its digest."""
    directory = Path(directory)
    repo, tag = name.rsplit(":", 1) if ":" in name.rpartition("/")[2] else (name, "latest")
    blobs = directory / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    model = {"mediaType": "application/vnd.ollama.image.model", **_put_blob(blobs, gguf_header(repo), size)}
    template = {"mediaType": "application/vnd.ollama.image.template", **_put_blob(blobs, b"{{ .Prompt }}")}
    config = {"model_format": "gguf", "model_family": "llama", "model_families": ["llama"], "model_type": "1.0M",
              "file_type": "Q4_K_M", "architecture": "amd64", "os": "linux"}  # fmt: skip
    config_blob = json.dumps(config, separators=(",", ":")).encode() + b"\n"  # json.Encoder.Encode
    config_layer = {"mediaType": CONFIG_MEDIA_TYPE, **_put_blob(blobs, config_blob)}
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE, "config": config_layer,
                "layers": [model, template]}  # fmt: skip
    raw = json.dumps(manifest, separators=(",", ":")).encode()  # json.Marshal, as PushModel sends it
    path = directory / "manifests" / repo / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    if corrupt:
        with open(blobs / f"sha256-{model['digest'][7:]}", "r+b") as f:
            f.seek(model["size"] - 1)
            f.write(b"\x01")
    return {"name": f"{repo}:{tag}", "manifest": manifest, "raw": raw, "digest": hashlib.sha256(raw).hexdigest(),
            "size": sum(layer["size"] for layer in [*manifest["layers"], config_layer])}  # fmt: skip


class Registry(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, directory: Path, bytes_per_second: int, direct_blobs: bool):
        super().__init__(address, Handler)
        self.directory, self.bytes_per_second, self.direct_blobs = directory, bytes_per_second, direct_blobs
        self.requests: list[dict] = []
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Registry

    def setup(self):
        super().setup()
        self.first = True

    def log_message(self, fmt, *args):
        sys.stderr.write(f"{self.address_string()} {fmt % args}\n")

    def handle_one_request(self):
        if self.first:  # a TLS hello on this plain-HTTP port: the 400 a Go server writes
            self.first = False
            try:
                hello = self.connection.recv(1, socket.MSG_PEEK) == b"\x16"
            except OSError:
                hello = False
            if hello:
                self.wfile.write(b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                                 b"Connection: close\r\n\r\n400 Bad Request")  # fmt: skip
                self.close_connection = True
                return
        super().handle_one_request()

    def _json(self, code: int, obj, content_type: str = "application/json; charset=utf-8") -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _unknown(self, code: str, message: str, detail) -> None:
        self._json(404, {"errors": [{"code": code, "message": message, "detail": detail}]})

    def _record(self) -> dict:
        record = {"method": self.command, "path": self.path, "range": self.headers.get("Range"), "status": 0,
                  "bytes": 0}  # fmt: skip
        with self.server.lock:
            self.server.requests.append(record)
        return record

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        record = self._record()
        path = self.path.split("?")[0]
        if path == "/standin/stats":
            with self.server.lock:
                requests = [dict(r) for r in self.server.requests if r is not record]
            return self._json(200, {"requests": requests, "blob_bytes": sum(r["bytes"] for r in requests)})
        if path == "/v2/":
            return self._json(200, {})
        if m := CDN.match(path):
            return self._blob(record, m["digest"])
        m = ROUTE.match(path)
        if m is None:
            return self._json(404, {"errors": [{"code": "NOT_FOUND", "message": "not found"}]})
        if m["kind"] == "manifests":
            manifest = self.server.directory / "manifests" / m["repo"] / m["ref"]
            if not manifest.is_file():
                return self._unknown("MANIFEST_UNKNOWN", "manifest unknown", {"Tag": m["ref"]})
            raw = manifest.read_bytes()
            record["status"] = 200
            self.send_response(200)
            self.send_header("Content-Type", MANIFEST_MEDIA_TYPE)
            self.send_header("Content-Length", str(len(raw)))
            self.send_header("Docker-Content-Digest", f"sha256:{hashlib.sha256(raw).hexdigest()}")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(raw)
            return None
        digest = m["ref"]
        blob = self._blob_path(digest)
        if blob is None:
            return self._unknown("BLOB_UNKNOWN", "blob unknown to registry", digest)
        if self.command == "HEAD" or self.server.direct_blobs:
            return self._blob(record, digest)
        record["status"] = 200
        self.send_response(200)
        self.send_header("Location", f"http://{self.headers.get('Host')}/cdn/blobs/{digest}")
        self.send_header("Content-Length", "0")
        self.end_headers()
        return None

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/standin/throttle":
            self.server.bytes_per_second = int(body.get("bytes_per_second", 0))
            return self._json(200, {"bytes_per_second": self.server.bytes_per_second})
        return self._json(404, {"errors": [{"code": "NOT_FOUND", "message": "not found"}]})

    def _blob_path(self, digest: str) -> Path | None:
        if not DIGEST.match(digest):
            return None
        path = self.server.directory / "blobs" / f"sha256-{digest[7:]}"
        return path if path.is_file() else None

    def _blob(self, record: dict, digest: str) -> None:
        path = self._blob_path(digest)
        if path is None:
            return self._unknown("BLOB_UNKNOWN", "blob unknown to registry", digest)
        size = path.stat().st_size
        start, end, code = 0, size - 1, 200
        if (wanted := self.headers.get("Range")) and self.command == "GET":
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
            if m is None or int(m[1]) >= size:
                record["status"] = 416
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            start, end, code = int(m[1]), min(int(m[2] or size - 1), size - 1), 206
        record["status"] = code
        self.send_response(code)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Docker-Content-Digest", digest)
        if code == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return None
        with open(path, "rb") as f:
            f.seek(start)
            left = end - start + 1
            while left > 0:
                rate = self.server.bytes_per_second
                chunk = f.read(min(left, 16384 if rate else 1 << 20))
                try:
                    self.wfile.write(chunk)
                except OSError:  # the puller went away (cancelled, or killed)
                    self.close_connection = True
                    return None
                left -= len(chunk)
                with self.server.lock:
                    record["bytes"] += len(chunk)
                if rate:
                    time.sleep(len(chunk) / rate)
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("--dir", required=True)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--bytes-per-second", type=int, default=int(os.environ.get("STANDIN_REGISTRY_BPS", "0")))
    serve.add_argument("--direct-blobs", action="store_true")
    model = sub.add_parser("write-model")
    model.add_argument("--dir", required=True)
    model.add_argument("--name", default="library/tiny:latest")
    model.add_argument("--size", type=int, default=1 << 20)
    model.add_argument("--corrupt", action="store_true")
    args = parser.parse_args()
    if args.command == "write-model":
        written = write_model(args.dir, args.name, args.size, args.corrupt)
        print(json.dumps({"name": written["name"], "digest": written["digest"], "size": written["size"]}))
        return
    registry = Registry((args.host, args.port), Path(args.dir), args.bytes_per_second, args.direct_blobs)
    print(f"registry stand-in serving {args.dir} on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    registry.serve_forever()


if __name__ == "__main__":
    main()
