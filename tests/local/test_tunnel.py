"""The tunnel and the pinned host keys against a real OpenSSH sshd and the SwarmUI stand-in on loopback.

The ground's VMs get the same checks through `gpu-rent up` (tests/ground/test_rental.py); here the
parts that need a second sshd (a changed host key) or a killed SSH connection are quick to set up.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from websockets.sync.client import connect as ws_connect

from gpu_rent.to_vm import ssh
from gpu_rent.to_vm.tunnel import Forward, PortBusy, Tunnel
from tests.loopback_sshd import Sshd, free_port, keygen
from tests.unit.test_swarmui_standin import start as start_standin
from tests.unit.test_swarmui_standin import stop as stop_standin


@pytest.fixture(scope="module")
def swarm(tmp_path_factory):
    swarm, proc = start_standin(tmp_path_factory.mktemp("standin") / "SwarmUI", comfy=False)
    yield swarm
    stop_standin(proc)


def target(sshd: Sshd, known_hosts: Path, alias: str = "gpu-rent-boot-1") -> ssh.Target:
    return ssh.Target("127.0.0.1", "root", sshd.client_key, known_hosts, alias, port=sshd.port)


class Running:
    """A Tunnel on its own event loop in a thread, as the tunnel process runs it."""

    def __init__(self, tgt: ssh.Target, remote_port: int, local_port: int | None = None, also=()):
        self.target = tgt
        self.loop = asyncio.new_event_loop()
        self.lines: list[str] = []
        port = local_port or free_port()
        self.tunnel = Tunnel(lambda: ssh.connect(self.target), port, remote_port, self.lines.append, also=also)
        self.ups = 0
        self.error: BaseException | None = None
        ready = threading.Event()

        async def main():
            try:
                await self.tunnel.listen()
            except BaseException as e:
                self.error = e
                ready.set()
                return
            ready.set()
            try:
                await self.tunnel.run(on_up=self._up)
            except BaseException as e:
                self.error = e

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(main(),), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _up(self) -> None:
        self.ups += 1

    def wait_up(self, count: int = 1, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while self.ups < count:
            assert self.error is None, self.error
            assert time.monotonic() < deadline, f"tunnel not up: {self.lines}"
            time.sleep(0.05)

    def close(self) -> None:
        if self.error is not None:  # run() is ending by itself: let its loop go free first
            self.thread.join(5)
        if not self.thread.is_alive():  # run() already ended (an error): its loop is free
            self.loop.run_until_complete(self.tunnel.close())
            return
        asyncio.run_coroutine_threadsafe(self.tunnel.close(), self.loop).result(5)
        for task in asyncio.all_tasks(self.loop):
            self.loop.call_soon_threadsafe(task.cancel)
        self.thread.join(5)


def post(port: int, route: str, body: dict) -> dict:
    request = urllib.request.Request(  # SwarmUI refuses another content type (src/WebAPI/API.cs)
        f"http://127.0.0.1:{port}{route}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_the_tunnel_reaches_swarmui_and_carries_websockets(sshd, swarm, tmp_path):
    known = tmp_path / "known_hosts"
    running = Running(target(sshd, known), swarm.port)
    try:
        running.wait_up()
        port = running.tunnel.local_port
        session = post(port, "/API/GetNewSession", {})
        assert session["user_id"] == "local" and session["session_id"]
        status = post(port, "/API/GetGlobalStatus", {"session_id": session["session_id"]})
        assert set(status["status"]) == {"waiting_gens", "loading_models", "waiting_backends", "live_gens"}
        with ws_connect(f"ws://127.0.0.1:{port}/StandinTest/EchoWS", open_timeout=10) as ws:
            for message in ("hello", "x" * 100_000, "ещё"):
                ws.send(message)
                assert ws.recv(timeout=10) == message
            ws.send(b"\x00\xff" * 1000)
            assert ws.recv(timeout=10) == b"\x00\xff" * 1000
        # the browser's side is loopback only
        listening = {s.getsockname() for server in running.tunnel._servers for s in server.sockets}
        assert listening == {("127.0.0.1", port)}
    finally:
        running.close()


def test_the_first_contact_pins_the_host_key_and_the_pin_is_checked_after(sshd, tmp_path):
    known = tmp_path / "known_hosts"
    asyncio.run(ssh.run(target(sshd, known), "true"))
    pinned = ssh.pinned_keys(known, "gpu-rent-boot-1")
    host_pub = (sshd.folder / "host.pub").read_text().split()[1]
    assert [k.export_public_key("openssh").decode().split()[1] for k in pinned] == [host_pub]
    assert oct(known.stat().st_mode & 0o777) == "0o600"
    done = asyncio.run(ssh.run(target(sshd, known), "echo again"))
    assert done.stdout == "again\n" and known.read_text().count("\n") == 1


def test_a_key_pinned_by_openssh_hashed_as_up_pins_it_is_accepted(sshd, tmp_path):
    known = tmp_path / "known_hosts"
    # what up's vm_host role does: OpenSSH, trust on first use under the boot volume's alias, hashed
    subprocess.run(
        ["ssh", "-p", str(sshd.port), "-i", str(sshd.client_key), "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=accept-new", "-o", f"UserKnownHostsFile={known}", "-o", "HashKnownHosts=yes",
         "-o", "HostKeyAlias=gpu-rent-boot-1", "root@127.0.0.1", "true"],
        check=True, capture_output=True,
    )  # fmt: skip
    assert known.read_text().startswith("|1|")
    assert asyncio.run(ssh.run(target(sshd, known), "echo ok")).stdout == "ok\n"
    assert known.read_text().count("\n") == 1  # nothing pinned twice


def test_a_changed_host_key_for_the_same_boot_volume_is_refused(sshd, tmp_path):
    known = tmp_path / "known_hosts"
    asyncio.run(ssh.run(target(sshd, known), "true"))
    with Sshd(tmp_path / "impostor", host_key=keygen(tmp_path / "other-host-key")) as impostor:
        impostor.client_key.write_bytes(sshd.client_key.read_bytes())
        bad = ssh.Target("127.0.0.1", "root", sshd.client_key, known, "gpu-rent-boot-1", port=impostor.port)
        with pytest.raises(ssh.HostKeyChanged) as refused:
            asyncio.run(ssh.run(bad, "true"))
        message = str(refused.value)
        assert "another host key than the one pinned for gpu-rent-boot-1" in message and str(known) in message
        # the tunnel gives up at once instead of retrying into another machine
        running = Running(bad, 9)
        deadline = time.monotonic() + 15
        while running.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert isinstance(running.error, ssh.HostKeyChanged)
        running.close()
    assert len(ssh.pinned_keys(known, "gpu-rent-boot-1")) == 1  # the impostor's key was not added


def test_a_killed_ssh_connection_reconnects_and_requests_work_again(sshd, swarm, tmp_path):
    running = Running(target(sshd, tmp_path / "known_hosts"), swarm.port)
    try:
        running.wait_up()
        port = running.tunnel.local_port
        assert post(port, "/API/GetNewSession", {})["session_id"]
        sshd.kill_sessions()  # every session's sshd process dies, as on a dropped network
        running.wait_up(2)
        assert running.tunnel.reconnects == 1
        assert post(port, "/API/GetNewSession", {})["session_id"]
        assert any("reconnecting" in line for line in running.lines), running.lines
    finally:
        running.close()


@pytest.fixture
def ollama(tmp_path):
    """The Ollama stand-in (ground/ollama-standin) serving on a loopback port of its own."""
    from tests.unit.test_ollama_standin import Ollama, stop

    server = Ollama(tmp_path / "ollama")
    yield server
    stop(server.proc)


def test_the_llm_runtime_is_forwarded_beside_swarmui_over_the_same_connection(sshd, swarm, ollama, tmp_path):
    llm_port = free_port()
    running = Running(target(sshd, tmp_path / "known_hosts"), swarm.port,
                      also=(Forward(llm_port, ollama.port, "LLM_LOCAL_PORT"),))  # fmt: skip
    try:
        running.wait_up()
        with urllib.request.urlopen(f"http://127.0.0.1:{llm_port}/api/version", timeout=10) as answer:
            assert "version" in json.loads(answer.read())
        assert post(running.tunnel.local_port, "/API/GetNewSession", {})["session_id"]
        assert running.tunnel.opened == 2 and running.tunnel.reconnects == 0  # one SSH connection for both
        listening = {s.getsockname() for server in running.tunnel._servers for s in server.sockets}
        assert listening == {("127.0.0.1", running.tunnel.local_port), ("127.0.0.1", llm_port)}
    finally:
        running.close()


@pytest.mark.parametrize("which", ["LOCAL_PORT", "LLM_LOCAL_PORT"])
def test_a_busy_port_names_its_setting_and_leaves_no_port_bound(sshd, swarm, tmp_path, which):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy, free = taken.getsockname()[1], free_port()
        first, llm = (busy, free) if which == "LOCAL_PORT" else (free, busy)
        running = Running(target(sshd, tmp_path / "known_hosts"), swarm.port, local_port=first,
                          also=(Forward(llm, 11434, "LLM_LOCAL_PORT"),))  # fmt: skip
        assert isinstance(running.error, PortBusy)
        assert str(running.error) == (
            f"127.0.0.1:{busy} is taken by another program ({which} in gpu-rent.vars picks another port)"
        )
        running.close()
        with socket.socket() as again:  # the other port, when it was bound, was let go
            again.bind(("127.0.0.1", free))
