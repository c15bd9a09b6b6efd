"""How the controller knows a VM's sshd is up (plugins/modules/ssh_greeting.py): its greeting, on loopback."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from tests.module_file import load

module = load("ssh_greeting", Path(__file__).resolve().parents[2] / "plugins" / "modules" / "ssh_greeting.py")


@pytest.fixture
def server():
    """A loopback server that says the given first words to each connection: (port, set words)."""
    listener = socket.create_server(("127.0.0.1", 0))
    said = {"words": b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n"}

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(said["words"])

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1], said
    listener.close()


def test_an_ssh_server_greets_with_its_identification(server):
    port, _ = server
    assert module.greeting("127.0.0.1", port, 1.0) == "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3"


def test_something_else_on_the_port_is_no_greeting(server):
    port, said = server
    said["words"] = b"HTTP/1.1 400 Bad Request\r\n\r\n"
    assert module.greeting("127.0.0.1", port, 1.0) is None


def test_a_closed_port_raises_for_the_next_try():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    with pytest.raises(OSError):
        module.greeting("127.0.0.1", port, 1.0)
