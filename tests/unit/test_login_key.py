"""The SSH key is checked before anything is rented (gpu_rent.to_vm.ssh.check_login_key): with real keys from
ssh-keygen and a real ssh-agent, as the VM's login would take them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from gpu_rent.to_vm import ssh as ssh_module
from gpu_rent.to_vm.ssh import SshError, check_login_key


def keygen(path: Path, passphrase: str = "") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(path)], check=True)
    return path


def public(key: Path) -> str:
    return key.with_name(key.name + ".pub").read_text()


@pytest.fixture
def agent(tmp_path, monkeypatch):
    """A real ssh-agent of this test's own; SSH_AUTH_SOCK points at it."""
    sock = tmp_path / "agent.sock"
    started = subprocess.run(["ssh-agent", "-a", str(sock)], capture_output=True, text=True, check=True)
    pid = int(re.search(r"SSH_AGENT_PID=(\d+)", started.stdout).group(1))
    monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
    yield sock
    os.kill(pid, 15)


def test_a_key_and_its_pub_pass(tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    key = keygen(tmp_path / "key")
    check_login_key(key, public(key))


def test_a_pub_of_another_key_is_refused_with_the_command_that_mends_it(tmp_path):
    key, other = keygen(tmp_path / "key"), keygen(tmp_path / "other")
    with pytest.raises(SshError, match=r"the key and .*key\.pub are not one pair \(ssh-keygen -y -f "):
        check_login_key(key, public(other))


def test_a_private_key_file_that_is_no_key_is_refused(tmp_path):
    key = keygen(tmp_path / "key")
    text = public(key)
    key.write_text("garbage\n")
    with pytest.raises(SshError, match="not a private key this program can read"):
        check_login_key(key, text)


def test_a_pub_that_is_no_public_key_is_refused(tmp_path):
    key = keygen(tmp_path / "key")
    with pytest.raises(SshError, match=r"key\.pub is not an SSH public key"):
        check_login_key(key, "ssh-ed25519 not-base64!")


def test_no_private_file_needs_an_agent_that_holds_the_key(tmp_path, monkeypatch, agent):
    key = keygen(tmp_path / "key")
    text = public(key)
    with pytest.raises(SshError, match=r"the SSH agent does not hold the key of .*gone\.pub \(ssh-add "):
        check_login_key(tmp_path / "gone", text)
    subprocess.run(["ssh-add", "-q", str(key)], check=True, env={**os.environ, "SSH_AUTH_SOCK": str(agent)})
    check_login_key(tmp_path / "gone", text)
    monkeypatch.delenv("SSH_AUTH_SOCK")
    with pytest.raises(SshError, match="not found, and no SSH agent to hold it"):
        check_login_key(tmp_path / "gone", text)


def test_a_locked_key_passes_once_the_agent_holds_it(tmp_path, agent):
    key = keygen(tmp_path / "key", passphrase="s3cret pass")
    with pytest.raises(SshError, match="the SSH agent does not hold the key"):
        check_login_key(key, public(key))
    # ssh-add would ask for the passphrase: unlocked for the add, locked again after
    subprocess.run(["ssh-keygen", "-q", "-p", "-P", "s3cret pass", "-N", "", "-f", str(key)], check=True)
    subprocess.run(["ssh-add", "-q", str(key)], check=True, env={**os.environ, "SSH_AUTH_SOCK": str(agent)})
    subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", "s3cret pass", "-f", str(key)], check=True)
    check_login_key(key, public(key))


def test_a_locked_key_with_an_agent_that_does_not_answer_says_so(tmp_path, monkeypatch):
    key = keygen(tmp_path / "key", passphrase="s3cret pass")
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "no-agent.sock"))
    with pytest.raises(SshError, match=r"needs a passphrase and the SSH agent \(SSH_AUTH_SOCK\) does not answer"):
        check_login_key(key, public(key))


def test_an_agent_that_never_answers_is_given_up_on(tmp_path, monkeypatch):
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "mute.sock"))
    sock.listen()  # takes the connection, never says a word
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "mute.sock"))
    monkeypatch.setattr(ssh_module, "AGENT_TIMEOUT", 0.5)
    assert ssh_module.check_login_key is check_login_key  # the module whose timeout is set is the one called
    key = keygen(tmp_path / "key")
    with pytest.raises(SshError, match="not found, and no SSH agent to hold it"):
        check_login_key(tmp_path / "gone", public(key))
    sock.close()
