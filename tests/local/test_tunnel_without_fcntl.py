"""`gpu-rent tunnel` end to end where POSIX-only modules are missing (Windows), issue 16.

The "VM" is the loopback sshd (tests/loopback_sshd.py) with a small HTTP server standing in for SwarmUI;
the cloud never answers, so the watchdog only says so and the tunnel stays. The tunnel's life lock and the
project's lock then work through filelock's marker files, across processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpu_rent.project.state import Phase, State, StateStore
from tests import without_posix
from tests.loopback_sshd import free_port

# The VM's sshd listens on the loopback one's port, not on 22
ON_LOOPBACK = """\
import dataclasses
from gpu_rent.to_vm import ssh
_of = ssh.Target.of.__func__
ssh.Target.of = classmethod(lambda cls, s, r: dataclasses.replace(_of(cls, s, r), port=int(os.environ["SSHD_PORT"])))
sys.argv[0] = "gpu-rent"
from gpu_rent.cli.app import main
main()
"""
DEAD_CLOUD = """clouds:
  test:
    auth: {auth_url: "http://127.0.0.1:9/v3", username: u, password: p, project_name: p,
           user_domain_name: Default, project_domain_name: Default}
    region_name: RegionOne
"""


class Swarm(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"SwarmUI on the VM"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def swarm():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Swarm)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def project(tmp_path: Path, sshd, swarm, monkeypatch) -> Path:
    """A project whose VM is the loopback sshd, its SwarmUI answering there, the tunnel recorded as not open."""
    for var in [v for v in os.environ if v.startswith(("OS_", "GPU_RENT_"))]:
        monkeypatch.delenv(var)
    (tmp_path / "clouds.yaml").write_text(DEAD_CLOUD)
    (tmp_path / ".env").write_text(
        f"OS_CLOUD=test\nOS_CLIENT_CONFIG_FILE={tmp_path / 'clouds.yaml'}\nGPU_RENT_SSH_KEY={sshd.client_key}\n"
    )
    (tmp_path / "gpu-rent.vars").write_text(
        f"POOL=ru-7a\nFLAVOR=gpu.a100.1\nIMAGE=Ubuntu 24.04 GPU\nLOCAL_PORT={free_port()}\nREMOTE_PORT={swarm}\n"
    )
    resources = {"server": "server-1", "boot_volume": "boot-1", "floating_ip_address": "127.0.0.1"}
    StateStore(tmp_path).save(State(phase=Phase.READY_CLOUD, resources=resources))
    return tmp_path


def cli(project: Path, *args: str) -> subprocess.CompletedProcess:
    return without_posix.cli(*args, "-p", str(project))


def record(project: Path) -> dict:
    try:
        return json.loads((project / ".gpu-rent" / "tunnel.json").read_text())
    except (OSError, ValueError):
        return {}


def wait_for(what, proc: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if proc.poll() is not None:
            pytest.fail(f"the tunnel ended ({proc.returncode}): {log.read_text()[-2000:]}")
        assert time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.1)


def start_tunnel(project: Path, sshd, log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-c", without_posix.PREAMBLE + ON_LOOPBACK, "tunnel", "-p", str(project),
             "--watch-seconds", "0.5"],
            stdout=out, stderr=subprocess.STDOUT, env=without_posix.env(SSHD_PORT=str(sshd.port)), text=True,
        )  # fmt: skip


@pytest.mark.parametrize("ending", ["close", "kill"])
def test_the_tunnel_forwards_is_seen_and_ends(project: Path, sshd, tmp_path: Path, ending: str):
    log = tmp_path / "tunnel.log"
    proc = start_tunnel(project, sshd, log)
    try:
        wait_for(lambda: record(project).get("state") == "forwarding", proc, log)
        # no flock here: the life lock is filelock's marker, naming the tunnel's process
        assert (project / ".gpu-rent" / "tunnel.alive").read_text().split()[0] == str(proc.pid)
        port = record(project)["local_port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
            assert response.read() == b"SwarmUI on the VM"
        # the watchdog asks the cloud, which never answers: it says so and the tunnel stays
        wait_for(lambda: "the cloud does not answer" in log.read_text(), proc, log)
        wait_for(lambda: StateStore(project).load().phase == Phase.READY_TUNNELED, proc, log)

        second = cli(project, "tunnel")  # another process sees the life lock held
        assert second.returncode == 0 and "a tunnel already runs" in second.stderr, second.stderr
        if ending == "close":
            closed = cli(project, "tunnel", "--close")
            assert closed.returncode == 0, closed.stderr
            assert closed.stdout.strip() == f"tunnel closed (pid {proc.pid}); the VM keeps running"
            assert proc.wait(15) == 0, log.read_text()
        else:
            proc.kill()
            proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    if ending == "close":
        assert record(project)["state"] == "closed"
        assert StateStore(project).load().phase == Phase.READY_CLOUD  # moved back under the project's lock
    # a killed tunnel's marker names a dead process: the next reader takes the lock over
    assert cli(project, "tunnel", "--close").stdout.strip() == "no tunnel runs"
