"""SSH to the project's VM in Python (asyncssh): no system `ssh` needed, so it works on Windows too.

Host keys are pinned per boot volume in `<project>/.gpu-rent/known_hosts` under the alias
`gpu-rent-<boot volume id>`: the host key lives on the boot volume, so every VM booted from it
(after a stop, a preemption, an unshelve) shows the same key, whatever its address - every create from
kept volumes tells cloud-init not to make new ones (plugins/module_utils/gpu_rent_warm_start.py
USER_DATA_NOTES). The first contact pins it (up's vm_host role does so with OpenSSH, this module when it
comes first); a different key for the same boot volume is refused.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from gpu_rent.project.state import KNOWN_HOSTS_FILE

# A dead peer (a laptop that slept, a VM that vanished) is noticed within about a minute.
KEEPALIVE_SECONDS = 15
KEEPALIVE_COUNT = 4


# AES-GCM runs on the CPU's AES instructions through `cryptography`: 1.1x OpenSSH's throughput
# through the tunnel where asyncssh's default ChaCha20 gives 0.6-0.9x (bench/tunnel.py).
CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com", "aes128-ctr")
# Held open with a terminal so that sshd marks the connection interactive and sets TCP_NODELAY on
# its side; without it every small answer through the tunnel waits ~40 ms for a delayed ACK.
KEEPER = "exec sleep 2147483647"


class SshError(Exception):
    """SSH to the VM failed; the message says why in words."""


class HostKeyChanged(SshError):
    """The VM answered with another host key than the one pinned for its boot volume."""


@dataclass(frozen=True)
class Target:
    """Where and as whom to log in, and which pinned key to expect."""

    address: str
    user: str
    key: Path
    known_hosts: Path
    alias: str  # the name the host key is pinned under
    port: int = 22

    @classmethod
    def of(cls, settings, resources: dict) -> Target:
        """The project's VM from the state's resources; SshError when up has not got that far."""
        address = resources.get("floating_ip_address")
        boot = resources.get("boot_volume")
        if not address or not boot:
            raise SshError("no VM address in the state: run gpu-rent up first")
        return cls(address, settings.ssh_user, settings.ssh_key, settings.runtime_dir / KNOWN_HOSTS_FILE, alias(boot))


def alias(boot_volume_id: str) -> str:
    return f"gpu-rent-{boot_volume_id}"


def pinned_keys(known_hosts: Path, name: str) -> list[asyncssh.SSHKey]:
    """The host keys known_hosts holds for `name` (hashed or plain entries, as OpenSSH writes them)."""
    try:
        text = known_hosts.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as e:
        raise SshError(f"cannot read {known_hosts}: {e.strerror}") from None
    try:
        found = asyncssh.import_known_hosts(text).match(name, "", None)
    except (asyncssh.Error, ValueError) as e:
        raise SshError(f"{known_hosts} is damaged ({e}): remove the broken line") from None
    return list(found[0])


def pin(known_hosts: Path, name: str, key: asyncssh.SSHKey) -> None:
    """Append the host key under `name`; the file is the user's only (it decides whom we trust)."""
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    line = f"{name} {key.export_public_key('openssh').decode().strip()}\n"
    fd = os.open(known_hosts, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(line)


def _changed(target: Target) -> HostKeyChanged:
    return HostKeyChanged(
        f"the VM at {target.address} shows another host key than the one pinned for {target.alias} "
        f"in {target.known_hosts}: refused, another machine may be answering there. If this boot volume "
        f"was rebuilt, delete the line for {target.alias} there and try again"
    )


async def connect(target: Target, timeout: float = 15) -> asyncssh.SSHClientConnection:
    """Log in to the VM, its host key checked against (or, the first time, pinned in) known_hosts."""
    trusted = pinned_keys(target.known_hosts, target.alias)
    options = {
        "username": target.user,
        "port": target.port,
        "client_keys": _client_keys(target.key),
        "known_hosts": (trusted, [], []) if trusted else None,
        "connect_timeout": timeout,
        "keepalive_interval": KEEPALIVE_SECONDS,
        "keepalive_count_max": KEEPALIVE_COUNT,
        "compression_algs": None,  # images and models do not compress; compressing costs CPU
        "encryption_algs": CIPHERS,
        "config": [],  # the user's ~/.ssh/config must not redirect the VM elsewhere
    }
    try:
        conn = await asyncssh.connect(target.address, **options)
    except asyncssh.HostKeyNotVerifiable:
        raise _changed(target) from None
    except asyncssh.PermissionDenied:
        raise SshError(
            f"{target.user}@{target.address} refused the key {target.key} (is it the key up put on the VM?)"
        ) from None
    except TimeoutError:
        raise SshError(f"SSH to {target.address} did not answer within {timeout:.0f}s") from None
    except (OSError, asyncssh.Error) as e:
        raise SshError(f"SSH to {target.address}:{target.port} failed: {_reason(e)}") from None
    if not trusted:
        pin(target.known_hosts, target.alias, conn.get_server_host_key())
    nodelay(conn.get_extra_info("socket"))
    return conn


async def make_interactive(conn: asyncssh.SSHClientConnection) -> bool:
    """Open the terminal session that turns on sshd's TCP_NODELAY (see KEEPER); False if refused."""
    try:
        await conn.create_process(KEEPER, term_type="dumb", stdin=asyncssh.DEVNULL)
    except (asyncssh.Error, OSError):
        return False
    return True


def _client_keys(key: Path) -> list | None:
    """The project's key; None (the SSH agent's keys) when there is no file or it needs a passphrase."""
    if not key.is_file():
        return None
    try:
        return [asyncssh.read_private_key(str(key))]
    except asyncssh.KeyImportError as e:
        if "passphrase" not in str(e).lower():
            raise SshError(f"GPU_RENT_SSH_KEY={key}: not a private key this program can read ({e})") from None
        if not os.environ.get("SSH_AUTH_SOCK") and os.name != "nt":
            raise SshError(
                f"GPU_RENT_SSH_KEY={key} needs a passphrase: add it to your SSH agent (ssh-add {key})"
            ) from None
        return None
    except OSError as e:
        raise SshError(f"GPU_RENT_SSH_KEY={key}: cannot read it ({e.strerror})") from None


AGENT_TIMEOUT = 5.0  # seconds the SSH agent has to list its keys


def check_login_key(key: Path, public_text: str) -> None:
    """Refuse (SshError), before anything is rented, a key the VM's login would refuse: the VM gets the .pub, and
    a login that fails after the create leaves a server billing with no idle-killer (it is armed over SSH).
    The private half must be one pair with the .pub: readable here, or held by the SSH agent."""
    try:
        public = asyncssh.import_public_key(public_text)
    except (asyncssh.KeyImportError, ValueError) as e:
        raise SshError(f"GPU_RENT_SSH_KEY={key}: {key}.pub is not an SSH public key ({e})") from None
    pair = f"ssh-keygen -y -f {key} > {key}.pub"
    keys = _client_keys(key)  # a file that is no key, unreadable, or locked with no agent: refused there
    if keys is not None:
        if keys[0].public_data != public.public_data:
            raise SshError(f"GPU_RENT_SSH_KEY={key}: the key and {key}.pub are not one pair ({pair})")
        return
    held = asyncio.run(_agent_keys())
    if held is None and key.is_file():  # locked: _client_keys let it through for an agent that is not there
        raise SshError(
            f"GPU_RENT_SSH_KEY={key} needs a passphrase and the SSH agent (SSH_AUTH_SOCK) does not answer: "
            f"start one and add the key to it (ssh-add {key})"
        )
    if held is None:
        raise SshError(f"GPU_RENT_SSH_KEY={key}: {key} not found, and no SSH agent to hold it")
    if public.public_data not in held:
        raise SshError(f"GPU_RENT_SSH_KEY={key}: the SSH agent does not hold the key of {key}.pub (ssh-add {key})")


async def _agent_keys() -> set[bytes] | None:
    """The public halves the SSH agent holds; None when no agent answers."""
    if not os.environ.get("SSH_AUTH_SOCK") and os.name != "nt":
        return None

    async def ask() -> set[bytes]:
        async with asyncssh.connect_agent() as agent:
            return {k.public_data for k in await agent.get_keys()}

    try:  # an agent that takes the connection and never answers must not hold up up or doctor
        return await asyncio.wait_for(ask(), AGENT_TIMEOUT)
    except (OSError, asyncssh.Error, ValueError, TimeoutError):
        return None


def nodelay(sock) -> None:
    """Small writes leave at once: Nagle plus delayed ACKs cost ~40 ms per request/response round."""
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _reason(e: BaseException) -> str:
    text = getattr(e, "reason", None) or getattr(e, "strerror", None) or str(e)
    return " ".join(str(text).split()) or type(e).__name__


async def run(target: Target, command: str, timeout: float = 30) -> asyncssh.SSHCompletedProcess:
    """One command on the VM; its exit status, stdout and stderr."""
    async with await connect(target) as conn:
        return await asyncio.wait_for(conn.run(command, check=False), timeout)
