"""A real OpenSSH sshd on 127.0.0.1 for tests and benchmarks of the laptop side (tunnel, push, pull).

It runs as root (sshd's privilege separation needs it), with its own host key, config and
authorized_keys in a temporary folder, on a free port; nothing of the machine's own sshd is touched.
Its sessions get an empty HOME, as root on a fresh cloud image has: this machine's `~/.bashrc` runs
`pyenv init`, whose rehash takes a lock file that a killed session leaves behind, and every later
session then waited 60 s for it (a CI run hung so).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def missing() -> str | None:
    """Why a loopback sshd cannot run here, or None."""
    if not Path(SSHD).exists():
        return "no sshd (apt-get install openssh-server)"
    if not shutil.which("ssh-keygen"):
        return "no ssh-keygen (apt-get install openssh-client)"
    if os.geteuid() != 0:
        return "a loopback sshd needs root (privilege separation)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


class Sshd:
    """sshd -D on 127.0.0.1:port; `client_key` logs in as root."""

    def __init__(self, folder: Path, host_key: Path | None = None):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.client_key = keygen(folder / "client") if not (folder / "client").exists() else folder / "client"
        self.host_key = host_key or (folder / "host" if (folder / "host").exists() else keygen(folder / "host"))
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> Sshd:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        authorized = self.folder / "authorized_keys"
        authorized.write_text((self.folder / "client.pub").read_text())
        authorized.chmod(0o600)
        home = self.folder / "home"
        home.mkdir(exist_ok=True)
        config = self.folder / "sshd_config"
        config.write_text(
            f"ListenAddress 127.0.0.1:{self.port}\nHostKey {self.host_key}\nAuthorizedKeysFile {authorized}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "UsePAM no\nStrictModes no\nAllowTcpForwarding yes\nSubsystem sftp internal-sftp\n"
            f"PidFile {self.folder / 'sshd.pid'}\nLogLevel ERROR\nMaxStartups 100\nMaxSessions 100\n"
            f"SetEnv HOME={home}\n"
        )
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {self.proc.stderr.read().decode()[-500:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise RuntimeError("sshd did not listen within 10 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)

    def kill_sessions(self) -> None:
        """Kill every session's sshd child (the listener stays): what a dropped network does to SSH."""
        subprocess.run(["pkill", "-KILL", "-P", str(self.proc.pid)], check=False)

    def __enter__(self) -> Sshd:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
