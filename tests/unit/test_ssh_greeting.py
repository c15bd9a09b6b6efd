"""How the controller knows a VM's sshd is up (plugins/modules/ssh_greeting.py): its greeting, on loopback."""

from __future__ import annotations

import shutil
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


def test_lines_before_the_identification_are_read_past(server):
    port, said = server
    said["words"] = b"Welcome to the bastion\r\nno unauthorised use\r\nSSH-2.0-OpenSSH_9.2p1\r\n"
    assert module.greeting("127.0.0.1", port, 1.0) == "SSH-2.0-OpenSSH_9.2p1"


SSH = shutil.which("ssh")


@pytest.mark.skipif(SSH is None, reason="needs OpenSSH's client (ssh -G)")
@pytest.mark.parametrize(
    ("config", "port", "where"),
    [
        ("", None, ("10.0.0.5", 22)),
        ("Host 10.0.0.5\n  ProxyJump bastion.example\n", None, None),
        ("Host 10.0.0.*\n  ProxyCommand ssh -W %h:%p bastion.example\n", None, None),
        ("Host 10.0.0.5\n  HostName 10.9.9.9\n", None, ("10.9.9.9", 22)),
        ("Host 10.0.0.5\n  Port 2222\n", None, ("10.0.0.5", 2222)),
        ("Host 10.0.0.5\n  Port 2222\n", 22, ("10.0.0.5", 22)),  # ansible_port set: ssh -o Port wins
        ("Host 10.1.*\n  ProxyJump bastion.example\n", None, ("10.0.0.5", 22)),
    ],
)
def test_the_greeting_is_looked_for_where_the_login_goes(tmp_path, config, port, where):
    (tmp_path / "config").write_text(config)
    args = f"-F {tmp_path / 'config'} -o StrictHostKeyChecking=accept-new -o 'UserKnownHostsFile=\"/tmp/x y\"'"
    assert module.reached(SSH, "10.0.0.5", port, "ubuntu", args) == where
    assert module.reached(None, "10.0.0.5", port, "ubuntu", args) == ("10.0.0.5", port or 22)  # login says why
