"""The LLM runtimes' stand-ins, served on the ground bridge for the llm_runtime scenario and test_rental.

    standin.py start --dir DIR [--host 10.231.7.1]   build the release (ground/ollama-standin/release.py) into
        DIR/release and the tiny model (registry.py write_model) into DIR/registry, and llama.cpp's release
        (ground/llamacpp-standin/release.py) with a tiny GGUF file into DIR/release/llamacpp; serve both on free
        ports of HOST, and write DIR/served.json: the release URLs, the model's name and manifest digest, the
        GGUF file's URL and sha256, the release server's log (one line per request), the two pids
    standin.py stop --dir DIR                        end exactly the processes served.json names, by pid

The ground hosts reach this machine at the bridge's address (ground/lib.sh EXT_GW), as tests/ground/test_seed.py
serves them files. Both servers run in sessions of their own, so the play that started them can end.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "ground" / "ollama-standin"
LLAMACPP = REPO / "ground" / "llamacpp-standin"
GGUF_NAME = "tiny-q4.gguf"
GGUF_SIZE = 3 * 1000 * 1000
MODEL = "library/tiny:latest"
MODEL_SIZE = 4 * 1000 * 1000
# Slow enough that the role's follow-up looks at the pull a few times, each with its progress line.
REGISTRY_BPS = 1000 * 1000


def _script(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_ports(host: str, count: int) -> list[int]:
    """Ports free on host now: held open together, so that they differ."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]


def spawn(argv: list[str], log: Path) -> int:
    with log.open("ab") as sink:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=log.parent)  # fmt: skip
    return proc.pid


def wait_answering(url: str, pid: int, log: Path, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as resp:
            if resp.status == 200:
                return
        if not alive(pid) or time.monotonic() > deadline:
            raise SystemExit(f"{url} does not answer (pid {pid}): {log.read_text()[-2000:]}")
        time.sleep(0.1)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")


def ours(pid: int, served: Path) -> bool:
    """The pid still runs one of this run's servers (and not a process that took the number since)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(arg.startswith(str(served).encode() + b"/") for arg in cmdline)


def stop(directory: Path) -> list[int]:
    record = directory / "served.json"
    try:
        pids = json.loads(record.read_text())["pids"].values()
    except (OSError, ValueError, KeyError):
        return []
    ended = []
    for pid in pids:
        if not ours(pid, directory):
            continue
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
        ended.append(pid)
    record.unlink()
    return ended


def start(directory: Path, host: str) -> dict:
    stop(directory)  # a run killed before its cleanup left its servers
    directory.mkdir(parents=True, exist_ok=True)
    release = _script("ollama_standin_release", STANDIN / "release.py")
    registry = _script("ollama_standin_registry", STANDIN / "registry.py")
    archive = release.build_release(directory / "release")
    written = registry.write_model(directory / "registry", MODEL, MODEL_SIZE)
    llamacpp = directory / "release" / "llamacpp"  # a folder of its own: its sha256sum.txt beside its archive
    llamacpp_archive = _script("llamacpp_standin_release", LLAMACPP / "release.py").build_release(llamacpp)
    gguf_sha256 = _script("llamacpp_standin_gguf", LLAMACPP / "gguf.py").write_model(llamacpp / GGUF_NAME, GGUF_SIZE)
    release_port, registry_port = free_ports(host, 2)
    pids = {
        "release": spawn([sys.executable, "-m", "http.server", "--bind", host, "--directory",
                          str(directory / "release"), str(release_port)], directory / "release.log"),
        "registry": spawn([sys.executable, str(STANDIN / "registry.py"), "serve", "--dir", str(directory / "registry"),
                           "--host", host, "--port", str(registry_port), "--bytes-per-second", str(REGISTRY_BPS)],
                          directory / "registry.log"),
    }  # fmt: skip
    served = {
        "release_url": f"http://{host}:{release_port}/{archive.name}",
        "model": f"{host}:{registry_port}/{written['name']}",
        "digest": f"sha256:{written['digest']}",
        "size": written["size"],
        "llamacpp_release_url": f"http://{host}:{release_port}/llamacpp/{llamacpp_archive.name}",
        "gguf_url": f"http://{host}:{release_port}/llamacpp/{GGUF_NAME}",
        "gguf_sha256": gguf_sha256,
        "release_log": str(directory / "release.log"),
        "pids": pids,
    }
    (directory / "served.json").write_text(json.dumps(served, indent=2) + "\n")
    wait_answering(served["release_url"].rsplit("/", 1)[0] + "/sha256sum.txt", pids["release"],
                   directory / "release.log")  # fmt: skip
    wait_answering(f"http://{host}:{registry_port}/v2/", pids["registry"], directory / "registry.log")
    return served


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["start", "stop"])
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--host", default="10.231.7.1")
    args = parser.parse_args()
    directory = args.dir.resolve()
    if args.command == "start":
        print(json.dumps(start(directory, args.host)))
    else:
        print(json.dumps({"ended": stop(directory)}))


if __name__ == "__main__":
    main()
