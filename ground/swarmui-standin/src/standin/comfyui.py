"""ComfyUI stand-in: what a self-started ComfyUI serves SwarmUI and the idle-killer.

launchtools/comfy-install-linux.sh copies this file to dlbackend/ComfyUI/main.py (where upstream's
installer clones ComfyUI), and the SwarmUI stand-in starts it as upstream does
(src/Backends/NetworkBackendUtils.cs DoSelfStart): `venv/bin/python3 -s main.py --port N ...` with
CUDA_VISIBLE_DEVICES=<GPU_ID>. Python stdlib only, one file: the venv has no packages.

Followed from ComfyUI's own sources (server.py, comfy/cli_args.py):
- the command line is parsed strictly, as cli_args.py does (an unknown argument exits with code 2);
  listens on --listen (127.0.0.1) and --port (8188);
- GET /queue {"queue_running": [...], "queue_pending": [...]}, items
  [number, prompt_id, prompt, extra_data, outputs_to_execute]; GET /prompt
  {"exec_info": {"queue_remaining": N}} (running + pending); GET /object_info (the node list SwarmUI
  loads before it calls the backend running); POST /prompt, POST /queue {clear, delete},
  POST /interrupt; every route also under /api, as server.py's add_routes does;
- a missing --extra-model-paths-config file ends the start with a traceback, as ComfyUI's loader does.
Stand-in only:
- not started from a venv, it fails as ComfyUI does on a python without torch (ModuleNotFoundError,
  exit 1): SwarmUI falls back to the system python3 when dlbackend/ComfyUI/venv/bin/python3 is absent;
- it listens after STANDIN_BACKEND_START_SECONDS (2 s), the time ComfyUI takes to load;
- POST /standin_test/queue {"count": K, "seconds": S} queues K prompts of S seconds each (a test hook:
  prompts as the Comfy Workflow tab sends them, unseen by SwarmUI's counters); a prompt sent to
  POST /prompt runs for extra_data.standin_seconds (1 s).
"""

import argparse
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

START_SECONDS = float(os.environ.get("STANDIN_BACKEND_START_SECONDS", "2"))
# ComfyUI's node list is long; SwarmUI reads the model lists of a few loaders from it
OBJECT_INFO = {
    "CheckpointLoaderSimple": {
        "input": {"required": {"ckpt_name": [[]]}},
        "input_order": {"required": ["ckpt_name"]},
        "output": ["MODEL", "CLIP", "VAE"],
        "output_is_list": [False, False, False],
        "output_name": ["MODEL", "CLIP", "VAE"],
        "name": "CheckpointLoaderSimple",
        "display_name": "Load Checkpoint",
        "description": "",
        "python_module": "nodes",
        "category": "loaders",
        "output_node": False,
    }
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The part of comfy/cli_args.py SwarmUI passes, and the flags people put in ExtraArgs."""
    p = argparse.ArgumentParser()
    p.add_argument("--listen", type=str, default="127.0.0.1", metavar="IP", nargs="?", const="0.0.0.0,::")
    p.add_argument("--port", type=int, default=8188)
    p.add_argument("--enable-cors-header", type=str, default=None, nargs="?", const="*")
    p.add_argument("--max-upload-size", type=float, default=100)
    p.add_argument("--base-directory", type=str)
    p.add_argument("--extra-model-paths-config", type=str, nargs="+", action="append")
    p.add_argument("--output-directory", type=str)
    p.add_argument("--input-directory", type=str)
    p.add_argument("--temp-directory", type=str)
    p.add_argument("--auto-launch", action="store_true")
    p.add_argument("--disable-auto-launch", action="store_true")
    p.add_argument("--cuda-device", type=int)
    p.add_argument("--preview-method", choices=["none", "auto", "latent2rgb", "taesd"], default="none")
    p.add_argument("--preview-size", type=int, default=512)
    p.add_argument("--front-end-version", type=str, default="comfyanonymous/ComfyUI@latest")
    p.add_argument("--front-end-root", type=str)
    p.add_argument("--fast", nargs="*", choices=["fp16_accumulation", "fp8_matrix_mult", "cublas_ops"])
    for flag in ("--gpu-only", "--highvram", "--normalvram", "--lowvram", "--novram", "--cpu", "--disable-xformers",
                 "--use-split-cross-attention", "--use-quad-cross-attention", "--use-pytorch-cross-attention",
                 "--use-sage-attention", "--force-fp16", "--force-fp32", "--fp16-vae", "--bf16-vae", "--cpu-vae",
                 "--disable-smart-memory", "--disable-metadata", "--disable-all-custom-nodes", "--multi-user",
                 "--dont-print-server", "--log-stdout"):  # fmt: skip
        p.add_argument(flag, action="store_true")
    p.add_argument("--reserve-vram", type=float)
    p.add_argument("--verbose", default="INFO", const="DEBUG", nargs="?")
    return p.parse_args(argv)


class PromptQueue:
    """execution.PromptQueue: one prompt runs at a time, the others wait in number order."""

    def __init__(self):
        self.lock = threading.Condition()
        self.pending: list[tuple[list, float]] = []
        self.running: list[list] = []
        self.number = 0
        threading.Thread(target=self._work, daemon=True).start()

    def put(self, prompt: dict, extra: dict, seconds: float) -> tuple[str, int]:
        with self.lock:
            prompt_id, number = str(uuid.uuid4()), self.number
            self.number += 1
            self.pending.append(([number, prompt_id, prompt, extra, []], seconds))
            self.lock.notify()
            return prompt_id, number

    def current(self) -> tuple[list, list]:
        with self.lock:
            return list(self.running), [item for item, _ in self.pending]

    def remaining(self) -> int:
        with self.lock:
            return len(self.running) + len(self.pending)

    def wipe(self, ids: list | None = None) -> None:
        with self.lock:
            self.pending = [(i, s) for i, s in self.pending if ids is not None and i[1] not in ids]

    def _work(self) -> None:
        while True:
            with self.lock:
                while not self.pending:
                    self.lock.wait()
                item, seconds = self.pending.pop(0)
                self.running = [item]
            time.sleep(seconds)
            with self.lock:
                self.running = []


class Handler(BaseHTTPRequestHandler):
    queue: PromptQueue
    server_version = "Python/aiohttp"

    def log_message(self, fmt, *args):  # ComfyUI logs no access lines
        pass

    def _json(self, obj, code: int = 200) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _empty(self, code: int) -> None:
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _route(self) -> str:
        route = self.path.split("?")[0]
        return route[4:] if route.startswith("/api/") else route

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        data = json.loads(self.rfile.read(length) or b"{}")
        return data if isinstance(data, dict) else {}

    def do_GET(self):
        route = self._route()
        if route == "/queue":
            running, pending = self.queue.current()
            return self._json({"queue_running": running, "queue_pending": pending})
        if route == "/prompt":
            return self._json({"exec_info": {"queue_remaining": self.queue.remaining()}})
        if route == "/object_info":
            return self._json(OBJECT_INFO)
        return self._empty(404)

    def do_POST(self):
        route = self._route()
        try:
            body = self._body()
        except ValueError:
            return self._empty(500)  # aiohttp's request.json() raises: an internal error
        if route == "/prompt":
            if "prompt" not in body:
                return self._json({"error": "no prompt", "node_errors": []}, 400)
            extra = dict(body.get("extra_data") or {})
            if "client_id" in body:
                extra["client_id"] = body["client_id"]
            seconds = float(extra.get("standin_seconds", 1))
            prompt_id, number = self.queue.put(body["prompt"], extra, seconds)
            return self._json({"prompt_id": prompt_id, "number": number, "node_errors": {}})
        if route == "/queue":
            if body.get("clear"):
                self.queue.wipe()
            if body.get("delete"):
                self.queue.wipe(list(body["delete"]))
            return self._empty(200)
        if route == "/interrupt":
            return self._empty(200)
        if route == "/standin_test/queue":
            for _ in range(int(body.get("count", 1))):
                self.queue.put({}, {"standin_test": True}, float(body.get("seconds", 5)))
            return self._json({"queued": int(body.get("count", 1))})
        return self._empty(404)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if sys.prefix == sys.base_prefix:  # not the venv's python: no torch here
        sys.stderr.write(
            'Traceback (most recent call last):\n  File "main.py", line 1, in <module>\n'
            "ModuleNotFoundError: No module named 'torch'\n"
        )
        return 1
    for paths in args.extra_model_paths_config or []:
        for path in paths:
            if not os.path.isfile(path):
                sys.stderr.write(
                    "Traceback (most recent call last):\n"
                    f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'\n"
                )
                return 1
    sys.stderr.write(f"Total VRAM 0 MB, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}\n")
    time.sleep(START_SECONDS)
    Handler.queue = PromptQueue()
    hosts = args.listen.split(",")
    servers = [ThreadingHTTPServer((host, args.port), Handler) for host in hosts if ":" not in host]
    for server in servers[1:]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stderr.write(f"Starting server\n\nTo see the GUI go to: http://{hosts[0]}:{args.port}\n")
    sys.stderr.flush()
    try:
        servers[0].serve_forever()
    except KeyboardInterrupt:  # SwarmUI stops it with SIGINT first (Utilities.KillProcess)
        sys.stderr.write("\nStopped server\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
