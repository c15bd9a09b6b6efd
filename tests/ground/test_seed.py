"""The seed role on a real ground host: extensions, autocomplete lists and models (SPEC §6, §7, §11).

Every case runs the real playbook (playbooks/seed.yml) with ansible-playbook over SSH against one rented
host. What the host downloads is served by this test process on the ground bridge (10.231.7.1): an HTTP
server with Range support that can pause, drop a connection part-way and log every request, and a git
daemon for the extensions. Nothing is mocked; nothing leaves loopback and the ground's network.

It stays one file past 500 lines: every case shares one rented host and the file and git servers at
its top; split, each half would rent a host of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from tests.ground import flat_layout
from tests.groundkit import HOST_VARS, REPO, Cloud, ssh, wait_for_ssh, wait_until

pytestmark = pytest.mark.ground

BRIDGE = "10.231.7.1"  # the ground's bridge: the hosts reach this machine here
BIN = Path(sys.executable).parent
PLAYBOOK = REPO / "playbooks" / "seed.yml"
SWARMUI = "/opt/swarmui"
LOCK = "/run/gpu-rent/seeding"
PROGRESS = "/run/gpu-rent/progress"
STANDIN_GIT = f"git://{BRIDGE}/SwarmUI.git"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
# -vvv prints a retried task's result as indented JSON after the retry line.
RETRY = re.compile(r"^FAILED - RETRYING: \[vm\]: Follow the download[^\n]*Result was: (\{.*?\n\})$", re.M | re.S)


# ------------------------------------------------------------------ what the host downloads from


@dataclass
class Seen:
    path: str
    range: str | None
    authorization: str | None


class FileServer:
    """HTTP on the ground bridge with Range, a pause and a one-time drop part-way, and a request log."""

    def __init__(self, host: str = BRIDGE):
        self.files: dict[str, bytes] = {}
        self.dispositions: dict[str, str] = {}
        self.civitai: dict[str, tuple[str, str]] = {}  # version id -> (file path, token it wants)
        self.drop_after: dict[str, int] = {}  # path -> bytes sent before the connection is cut, once
        self.pause_after: dict[str, tuple[int, threading.Event]] = {}  # path -> (bytes, released), once
        self.rate: dict[str, int] = {}  # path -> bytes per second
        self.ignore_range: set[str] = set()  # paths served whole whatever Range asks, as some servers do
        self.seen: list[Seen] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.handle(self)

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def add(self, path: str, data: bytes, disposition: str | None = None) -> str:
        self.files[path] = data
        if disposition:
            self.dispositions[path] = disposition
        return self.base + path

    def requests_for(self, prefix: str) -> list[Seen]:
        return [s for s in self.seen if s.path.startswith(prefix)]

    def close(self) -> None:
        for _, released in self.pause_after.values():
            released.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path.split("?", 1)[0]
        self.seen.append(Seen(path, h.headers.get("Range"), h.headers.get("Authorization")))
        if path.startswith("/civitai/"):
            target, token = self.civitai.get(path.rsplit("/", 1)[-1], (None, None))
            if target is None:
                return self.plain(h, 404, b"no such model version")
            if h.headers.get("Authorization") != f"Bearer {token}":
                return self.plain(h, 401, b"unauthorized")
            # Like Civitai: a presigned CDN link that must not receive the bearer token.
            h.send_response(307)
            h.send_header("Location", f"{self.base}{target}?X-Amz-Signature=abc123")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        data = self.files.get(path)
        if data is None:
            return self.plain(h, 404, b"not found")
        start = 0
        match = None if path in self.ignore_range else re.fullmatch(r"bytes=(\d+)-", h.headers.get("Range") or "")
        if match and int(match[1]) >= len(data):
            h.send_response(416)
            h.send_header("Content-Range", f"bytes */{len(data)}")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        if match:
            start = int(match[1])
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            h.send_response(200)
        h.send_header("Content-Length", str(len(data) - start))
        h.send_header("Accept-Ranges", "bytes")
        if path in self.dispositions:
            h.send_header("Content-Disposition", self.dispositions[path])
        h.end_headers()
        self.send_body(h, path, data[start:])
        return None

    def send_body(self, h: BaseHTTPRequestHandler, path: str, body: bytes) -> None:
        drop = self.drop_after.pop(path, None)
        pause = self.pause_after.pop(path, None)
        rate = self.rate.get(path)
        sent, step = 0, 64 * 1024
        try:
            while sent < len(body):
                if drop is not None and sent >= drop:
                    h.wfile.flush()
                    h.connection.shutdown(socket.SHUT_RDWR)  # cut mid-file, as a flaky link would
                    return
                if pause is not None and sent >= pause[0]:
                    pause[1].wait(60)
                    pause = None
                end = min(len(body), sent + step, drop if drop is not None and drop > sent else len(body))
                h.wfile.write(body[sent:end])
                sent = end
                if rate:
                    time.sleep(step / rate)
        except (BrokenPipeError, ConnectionResetError):
            pass

    @staticmethod
    def plain(h: BaseHTTPRequestHandler, code: int, body: bytes) -> None:
        h.send_response(code)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)


def free_port(host: str = BRIDGE) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------ the rented host


@dataclass
class Host:
    address: str

    def sh(self, command: str, timeout: float = 120) -> str:
        result = ssh(self.address, f"set -e\n{command}", timeout=timeout)
        assert result.returncode == 0, f"{command!r} on the host failed:\n{result.stderr}"
        return result.stdout

    def exists(self, path: str) -> bool:
        return ssh(self.address, f"test -e {path}").returncode == 0

    def sha256(self, path: str) -> str:
        return self.sh(f"sha256sum {path}").split()[0]


@pytest.fixture(scope="module")
def host(member_conn, net):
    """One host for every case. m1.small: seeding needs no GPU, and GPUs are scarce on the shared ground."""
    cloud = Cloud(member_conn)
    try:
        server = cloud.server(net, cloud.volume(10, image=True), flavor="m1.small", key_name=cloud.keypair())
        address = cloud.floating_ip(server)
        wait_for_ssh(address)
        yield Host(address)
    finally:
        cloud.close()


@pytest.fixture
def files():
    server = FileServer()
    yield server
    server.close()


@dataclass
class Run:
    rc: int
    out: str
    log: str
    counts: dict

    def fatal(self) -> str:
        """The message of the failed task, as printed."""
        assert self.rc != 0, self.out
        lines = [line for line in self.out.splitlines() if line.startswith("fatal:")]
        assert lines, self.out
        return lines[-1]


PLAYS: dict[int, tuple[threading.Thread, list[str]]] = {}  # a started play's reader and what it read


def start_play(
    host: Host, tmp_path: Path, extra: dict, verbosity: int = 0, check: bool = False
) -> tuple[subprocess.Popen, Path]:
    """ansible-playbook against the host from a folder with no gpu-rent.vars (the vars plugin adds nothing)."""
    work = tmp_path / f"run-{time.monotonic_ns()}"
    work.mkdir()
    inventory = work / "inventory.yml"
    host_vars = {
        "ansible_host": host.address,
        **HOST_VARS,
        "ansible_python_interpreter": "/usr/bin/python3",
    }
    inventory.write_text(yaml.safe_dump({"gpu_rent_vm": {"hosts": {"vm": host_vars}}}))
    (work / "vars.yml").write_text(yaml.safe_dump(extra))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "GPU_RENT_"))}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="0",
        ANSIBLE_LOG_PATH=str(work / "ansible.log"),
    )  # fmt: skip
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), "-e", "@vars.yml", str(PLAYBOOK)]
    if verbosity:
        argv.append("-" + "v" * verbosity)
    if check:
        argv.append("--check")
    proc = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    # Read while it runs: a -vvv play writes more than a pipe holds, and would stall on a full one (its
    # download held up) while a test looks at the host before finish_play reads.
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.append(proc.stdout.read()), daemon=True)
    reader.start()
    PLAYS[proc.pid] = (reader, output)
    return proc, work


def finish_play(proc: subprocess.Popen, work: Path, timeout: float = 600) -> Run:
    proc.wait(timeout=timeout)
    reader, output = PLAYS.pop(proc.pid)
    reader.join(timeout=60)
    out = "".join(output)
    recaps = RECAP.findall(out)
    assert recaps, f"no PLAY RECAP:\n{out}"
    _, ok, changed, unreachable, failed = recaps[-1]
    counts = {"ok": int(ok), "changed": int(changed), "unreachable": int(unreachable), "failed": int(failed)}
    log = (work / "ansible.log").read_text() if (work / "ansible.log").exists() else ""
    return Run(proc.returncode, out, log, counts)


def play(host: Host, tmp_path: Path, verbosity: int = 0, check: bool = False, **extra) -> Run:
    return finish_play(*start_play(host, tmp_path, extra, verbosity, check))


# ------------------------------------------------------------------ models and autocomplete lists


def test_a_verified_model_and_lists_land_and_a_second_run_changes_and_downloads_nothing(host, files, tmp_path):
    model = os.urandom(3 * 1024 * 1024 + 17)
    tags = b"tag,type,count\n1girl,0,100\nlandscape,0,50\n"
    extra = {
        # Keys set to null, as gpu_rent.project.seed_list hands entries over, count as absent.
        "seed_models": [
            {"url": files.add("/m/tiny%20model.safetensors", model), "civitai": None, "sha256": sha256(model),
             "folder": "Lora", "name": None}
        ],
        "seed_autocomplete": [
            {"url": files.add("/ac/danbooru.csv", tags), "sha256": None},
            {"url": files.add("/ac/e621-v2.csv", tags + b"x,0,1\n"), "sha256": sha256(tags + b"x,0,1\n"),
             "name": "e621.csv"},
        ],
    }  # fmt: skip

    dry = play(host, tmp_path, check=True, **extra)
    assert dry.rc == 0, dry.out
    assert files.seen == []  # check mode looks, and downloads nothing

    first = play(host, tmp_path, **extra)
    assert first.rc == 0, first.out
    assert first.counts["changed"] > 0
    dest = f"{SWARMUI}/Models/Lora/tiny model.safetensors"
    assert host.sha256(f"'{dest}'") == sha256(model)
    assert host.sh(f"ls -A {SWARMUI}/Models/Lora").splitlines() == [
        "tiny model.safetensors", "tiny model.safetensors.gpu-rent-sha256"]  # fmt: skip
    assert host.sh(f"cat {SWARMUI}/Data/Autocompletions/danbooru.csv").encode() == tags
    assert host.sha256(f"{SWARMUI}/Data/Autocompletions/e621.csv") == sha256(tags + b"x,0,1\n")
    assert not host.exists(LOCK)
    asked = len(files.seen)
    assert asked == 3

    second = play(host, tmp_path, **extra)
    assert second.rc == 0, second.out
    assert second.counts["changed"] == 0, second.out
    assert len(files.seen) == asked  # not one request: the sidecar vouches for the model, the lists are there

    # Only seed_only's part runs (the role's tasks_from entry point with its own argument spec).
    third = play(host, tmp_path, seed_only="autocomplete", **extra)
    assert third.rc == 0 and third.counts["changed"] == 0, third.out
    assert "models" not in " ".join(line for line in third.out.splitlines() if line.startswith("TASK"))


def test_a_boot_volume_with_the_flat_scripts_gets_the_package_and_loses_them(host, files, tmp_path):
    """A kept boot volume of an older gpu-rent (tests/ground/flat_layout.py): the seeding installs the on_vm
    package and removes the flat scripts and the byte code of their imports, which nothing runs any more."""
    program = flat_layout.PROGRAM_DIR
    flat_layout.lay(host.address, flat_layout.scripts())
    # the old script as the old role ran it: its import of progress_line leaves byte code beside it
    host.sh(f"rm -rf {program}/on_vm\npython3 {program}/fetch.py lock --file /tmp/flat-lock --minutes 1\n"
            f"test -d {program}/__pycache__")  # fmt: skip
    tags = b"tag,type,count\nflat,0,1\n"
    run = play(host, tmp_path, seed_autocomplete=[{"url": files.add("/ac/flat.csv", tags), "sha256": sha256(tags)}])
    assert run.rc == 0, run.out
    assert "TASK [seed : Remove the scripts' files of before the on_vm package]" in run.out
    left = host.sh(f"ls -A {program}").split()
    assert "on_vm" in left and not {*flat_layout.SCRIPTS, "__pycache__"} & set(left), left
    package = set(host.sh(f"ls {program}/on_vm").split()) - {"__pycache__"}
    assert package == {"__init__.py", "fetch.py", "paths.py", "progress_line.py"}, "the seed role's part of on_vm"
    assert host.sh(f"cat {SWARMUI}/Data/Autocompletions/flat.csv").encode() == tags


def test_a_wrong_checksum_fails_in_words_and_leaves_no_file_and_no_lock(host, files, tmp_path):
    data = os.urandom(1024 * 1024)
    wrong = "0" * 64
    run = play(host, tmp_path, seed_models=[
        {"url": files.add("/m/bad.safetensors", data), "sha256": wrong, "folder": "Stable-Diffusion"}])  # fmt: skip
    message = run.fatal()
    assert f"sha256 mismatch for bad.safetensors: expected {wrong}, got {sha256(data)}; removed" in message, message
    assert host.sh(f"ls -A {SWARMUI}/Models/Stable-Diffusion | grep bad || true").strip() == ""
    assert not host.exists(LOCK)


def test_a_missing_file_fails_with_the_http_error(host, files, tmp_path):
    run = play(host, tmp_path, seed_models=[
        {"url": files.base + "/m/gone.safetensors", "sha256": "1" * 64, "folder": "Lora"}])  # fmt: skip
    message = run.fatal()
    assert "download of gone.safetensors failed: HTTP 404 Not Found from" in message, message
    assert not host.exists(f"{SWARMUI}/Models/Lora/gone.safetensors.part")
    assert not host.exists(LOCK)


def test_an_interrupted_download_resumes_with_a_range_request(host, files, tmp_path):
    data = os.urandom(4 * 1024 * 1024)
    url = files.add("/m/big.safetensors", data)
    entry = {"url": url, "sha256": sha256(data), "folder": "VAE"}
    part = f"{SWARMUI}/Models/VAE/big.safetensors.part"

    files.drop_after["/m/big.safetensors"] = 1024 * 1024
    cut = play(host, tmp_path, seed_models=[entry], seed_download_retries=0)
    message = cut.fatal()
    assert "download of big.safetensors interrupted after" in message and "run again to resume" in message, message
    kept = int(host.sh(f"stat -c %s {part}"))
    assert 0 < kept <= 1024 * 1024
    assert not host.exists(LOCK)

    # The next run resumes where the first stopped; its first try is cut again, and it resumes within the run.
    files.drop_after["/m/big.safetensors"] = 1024 * 1024
    resumed = play(host, tmp_path, seed_models=[entry])
    assert resumed.rc == 0, resumed.out
    ranges = [s.range for s in files.requests_for("/m/big.safetensors")]
    assert ranges[0] is None
    assert ranges[1] == f"bytes={kept}-"
    assert ranges[2] == f"bytes={kept + 1024 * 1024}-"
    assert len(ranges) == 3
    assert host.sha256(f"{SWARMUI}/Models/VAE/big.safetensors") == sha256(data)
    assert not host.exists(part)


def test_civitai_token_stays_secret_while_the_lock_and_progress_show_the_download(host, files, tmp_path):
    token = "civitai-" + os.urandom(12).hex()
    data = os.urandom(3 * 1024 * 1024)
    files.add("/cdn/model-9.bin", data, disposition='attachment; filename="civ model.safetensors"')
    files.civitai["128713"] = ("/cdn/model-9.bin", token)
    released = threading.Event()
    files.pause_after["/cdn/model-9.bin"] = (1024 * 1024, released)
    files.rate["/cdn/model-9.bin"] = 1024 * 1024  # slow enough for a throttled progress line before the pause
    extra = {
        "seed_models": [{"url": None, "civitai": 128713, "sha256": sha256(data), "folder": "Stable-Diffusion"}],
        "gpu_rent_civitai_token": token,  # as the project's vars plugin hands it over (.env CIVITAI_TOKEN)
        "seed_civitai_download_url": files.base + "/civitai/",
        "seed_poll_delay": 1,
    }
    proc, work = start_play(host, tmp_path, extra, verbosity=3)
    try:
        # The download is held half-way by the server: look at the host while it runs.
        part = f"{SWARMUI}/Models/Stable-Diffusion/civitai-128713.part"
        wait_until("the download to start", lambda: host.exists(part), 120)
        until = int(host.sh(f"cat {LOCK}"))
        now = int(host.sh("date +%s"))
        assert now + 5 * 60 <= until <= now + 10 * 60  # seed_lock_minutes: short, each download refreshes it
        progress = wait_until("a progress line with bytes done", lambda: _progress(host), 30)
        assert progress["stage"] == "models: civ model.safetensors" and progress["total"] == len(data)
        assert 0 < progress["done"] <= 1024 * 1024
        processes = host.sh("ps -eo args")
        assert "-m on_vm.fetch fetch" in processes and token not in processes
        assert host.sh(f"grep -l -s -F {token} /proc/[0-9]*/environ || true").strip() == ""
        assert host.sh("stat -c %a /run/gpu-rent/civitai-token").strip() == "600"
        time.sleep(3)  # a few more polls while paused
    finally:
        released.set()
    run = finish_play(proc, work)
    assert run.rc == 0, run.out[-5000:]

    assert host.sha256(f"'{SWARMUI}/Models/Stable-Diffusion/civ model.safetensors'") == sha256(data)
    assert not host.exists(f"{SWARMUI}/Models/Stable-Diffusion/civitai-128713.part")
    assert not host.exists(LOCK)
    assert not host.exists("/run/gpu-rent/civitai-token")
    assert token not in run.out and token not in run.log
    left = host.sh(f"grep -r -l -s -F {token} {SWARMUI}/Models /run/gpu-rent /root/.ansible_async || true")
    assert left.strip() == ""
    (asked,) = files.requests_for("/civitai/")
    assert asked.authorization == f"Bearer {token}"
    cdn = files.requests_for("/cdn/")
    assert cdn and all(s.authorization is None for s in cdn)  # never forwarded along the redirect

    # Each retry of the follow-up task carries the latest progress line (the wrapper reads these events).
    retried = [json.loads(m) for m in RETRY.findall(run.out)]
    assert len(retried) >= 3, run.out[-5000:]
    shown = [json.loads(line.removeprefix("::gpu-rent-progress "))
             for r in retried for line in r["stdout_lines"] if line.startswith("::gpu-rent-progress ")]  # fmt: skip
    assert any(0 < p["done"] < len(data) for p in shown), retried
    assert all(p["stage"] == "models: civ model.safetensors" for p in shown if p["done"] > 0)

    again = play(host, tmp_path, **extra)
    assert again.rc == 0 and again.counts["changed"] == 0, again.out
    assert len(files.requests_for("/civitai/")) == 1  # found by its checksum, without asking Civitai for the name


def _progress(host: Host) -> dict | None:
    line = host.sh(f"cat {PROGRESS} 2>/dev/null || true").strip()
    progress = json.loads(line.removeprefix("::gpu-rent-progress ")) if line else None
    return progress if progress and progress["done"] > 0 else None


# ------------------------------------------------------------------ extensions


def git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def git_daemon(tmp_path):
    """A bare repository of an extension, served with git daemon on the bridge."""
    base = tmp_path / "git"
    work = tmp_path / "ext"
    base.mkdir()
    git("init", "-q", "--bare", "-b", "master", str(base / "SeedTestExtension.git"))
    git("init", "-q", "-b", "master", str(work))
    (work / "SeedTestExtension.cs").write_text("public class SeedTestExtension : Extension { }\n")
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "first", cwd=work)
    git("push", "-q", str(base / "SeedTestExtension.git"), "master", cwd=work)
    port = free_port()
    daemon = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={base}", f"--listen={BRIDGE}",
         f"--port={port}", str(base)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until("git daemon", lambda: _listening(BRIDGE, port), 10, 0.1)
        yield f"git://{BRIDGE}:{port}/SeedTestExtension.git", work, base / "SeedTestExtension.git"
    finally:
        daemon.terminate()
        daemon.wait(10)


def _listening(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


UNIT = """[Unit]
Description=SwarmUI stand-in for the seed tests
[Service]
WorkingDirectory=/opt/swarmui
Environment=HOME=/root
ExecStart=/opt/swarmui/launch-linux.sh --launch_mode none --host 127.0.0.1 --port 7801
RestartForceExitStatus=42
Restart=on-failure
[Install]
WantedBy=multi-user.target
"""
BUILDS_LOG = "/root/.dotnet/standin-builds.log"  # one line per build of the stand-in dotnet


@pytest.fixture
def swarmui(host):
    """The stand-in installed as the swarmui unit, the way roles/swarmui leaves SwarmUI, in a few seconds."""
    host.sh(
        f"rm -rf {SWARMUI}/.git {SWARMUI}/src {SWARMUI}/launch-linux.sh {SWARMUI}/launchtools\n"
        f"git clone -q {STANDIN_GIT} /tmp/standin && cd /tmp/standin && git checkout -q 0.9.8.2-standin\n"
        f"mkdir -p {SWARMUI} && cp -a /tmp/standin/. {SWARMUI}/ && rm -rf /tmp/standin && cd {SWARMUI}\n"
        "[ -x /root/.dotnet/dotnet ] || HOME=/root bash launchtools/linux-dotnet-install.sh /root/.dotnet >/dev/null\n"
        "[ -f dlbackend/ComfyUI/main.py ] || bash launchtools/comfy-install-linux.sh nv >/dev/null\n"
        "mkdir -p Data\n"
        "printf 'IsInstalled: true\\nLaunchMode: none\\n' > Data/Settings.fds\n"
        "printf '0:\\n    type: comfyui_selfstart\\n    title: ComfyUI\\n    enabled: true\\n    settings:\\n"
        "        StartScript: dlbackend/ComfyUI/main.py\\n        GPU_ID: 0\\n' > Data/Backends.fds\n"
        f"cat > /etc/systemd/system/swarmui.service <<'EOF'\n{UNIT}EOF\n"
        "systemctl daemon-reload && systemctl restart swarmui"
    )
    wait_until("the stand-in's API", lambda: "session_id" in _api(host), 60)
    yield host
    # Killed, not stopped: this unit has systemd's 90 s stop timeout, and one teardown in a whole-suite run
    # waited that long for it (not seen alone); the next case installs the stand-in anew.
    host.sh("systemctl kill -s KILL swarmui || true; systemctl stop swarmui || true")
    host.sh(f"rm -rf {SWARMUI}/src/Extensions/*/")


def _api(host: Host) -> str:
    api = "http://127.0.0.1:7801/API/GetNewSession"
    return ssh(host.address, f"curl -s -X POST -H 'Content-Type: application/json' -d '{{}}' {api}").stdout


def _unit(host: Host) -> str:
    return host.sh("systemctl show -p InvocationID --value swarmui").strip()


def _core_builds(host: Host) -> int:
    """Builds of SwarmUI itself (src/SwarmUI.csproj) the stand-in dotnet has made on the host."""
    return host.sh(f"cat {BUILDS_LOG} 2>/dev/null || true").count("SwarmUI.csproj ->")


def _dll(host: Host, folder: str) -> str:
    """Where upstream's ExtensionsManager.BuildExtension puts the extension's build."""
    head = host.sh(f"git -C {SWARMUI}/src/Extensions/{folder} rev-parse HEAD").strip()
    return f"{SWARMUI}/src/bin/extensions/SwarmExtension{folder}/SwarmExtension{folder}-{head[:8]}.dll"


def test_an_extension_clone_restarts_swarmui_once_and_it_builds_the_extension_at_start(swarmui, git_daemon, tmp_path):
    """The stand-in builds extensions at start (src/SwarmUI.csproj leaves Extensions/** out, as upstream
    since 0.9.8-Beta): a restart alone builds a new one; must_rebuild would throw every build away."""
    host = swarmui
    url, work, _ = git_daemon
    extra = {"seed_extensions": [{"url": url}]}
    unit, builds = _unit(host), _core_builds(host)

    first = play(host, tmp_path, **extra)
    assert first.rc == 0, first.out
    ext = f"{SWARMUI}/src/Extensions/SeedTestExtension"
    assert host.sh(f"git -C {ext} rev-parse HEAD").strip() == git("rev-parse", "HEAD", cwd=work).strip()
    assert _unit(host) != unit  # restarted
    assert host.exists(_dll(host, "SeedTestExtension"))  # built at the start
    assert _core_builds(host) == builds  # and the core was not rebuilt
    assert not host.exists(f"{SWARMUI}/src/bin/must_rebuild")
    assert not host.exists(LOCK)

    unit = _unit(host)
    second = play(host, tmp_path, seed_only="extensions", **extra)
    assert second.rc == 0, second.out
    assert second.counts["changed"] == 0, second.out
    assert _unit(host) == unit  # nothing changed: no restart

    # A clone whose build is missing (a run that died between clone and restart) is a restart still owed.
    host.sh(f"rm -rf {SWARMUI}/src/bin/extensions/SwarmExtensionSeedTestExtension")
    owed = play(host, tmp_path, **extra)
    assert owed.rc == 0, owed.out
    assert _unit(host) != unit and host.exists(_dll(host, "SeedTestExtension"))
    unit = _unit(host)

    # An update upstream is not fetched by a plain re-run (that would restart SwarmUI under a user's
    # generation); asked for (seed_update), it is pulled and built under its new HEAD.
    (work / "README.md").write_text("v2\n")
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "second", cwd=work)
    git("push", "-q", str(git_daemon[2]), "master", cwd=work)
    plain = play(host, tmp_path, **extra)
    assert plain.rc == 0 and plain.counts["changed"] == 0, plain.out
    assert not host.exists(f"{ext}/README.md") and _unit(host) == unit
    third = play(host, tmp_path, seed_update=True, **extra)
    assert third.rc == 0 and third.counts["changed"] > 0, third.out
    assert host.exists(f"{ext}/README.md")
    assert _unit(host) != unit and host.exists(_dll(host, "SeedTestExtension"))
    assert _core_builds(host) == builds


def test_an_extension_whose_build_fails_fails_seeding_with_the_builds_own_line(swarmui, tmp_path):
    """Upstream logs a failed extension build (CriticalLoadError) and starts on without it: seeding
    finds the DLL missing and quotes the journal's error line. ~40 s on the ground."""
    host = swarmui
    bare = REPO / ".ground/git/StandinBrokenExtension.git"  # ground/targethost/publish-standin.sh made it
    said = git("--git-dir", str(bare), "show", "master:standin-build-error").splitlines()[0]
    run = play(host, tmp_path, seed_extensions=[{"url": f"git://{BRIDGE}/StandinBrokenExtension.git"}])
    message = run.fatal()
    assert (
        "extension StandinBrokenExtension did not build (no src/bin/extensions/SwarmExtensionStandinBrokenExtension/"
        in message
    )
    assert f"after the restart): {said}" in message, message
    assert not host.exists(LOCK)
    assert not host.exists(f"{SWARMUI}/src/bin/must_rebuild")
