"""The idle-killer's own view of the VM, as `gpu-rent status` shows it.

The killer writes its status file on the VM each tick (gpu_rent/on_vm/idle_killer.py); status reads it
over SSH and says, in one line, when the VM goes or what keeps it, and loudly when the killer is
blind (credential refused, silent timer).
"""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from gpu_rent.on_vm import paths
from gpu_rent.project.state import KNOWN_HOSTS_FILE

STATUS_FILE = paths.STATUS_FILE
# The VM's clock, printed before the report: the killer's times are the VM's own, and compared with a laptop's
# clock that is off they would call a ticking killer SILENT, or a dead one alive, by the skew (money review #16).
READ_COMMAND = f"date +%s; cat {STATUS_FILE}"
# Added to the report read: how many seconds the VM's clock is ahead of this machine's at the read.
VM_CLOCK_AHEAD = "vm_clock_ahead"
# A killer that has not ticked for this long is not running: say so rather than trust its last word.
SILENT_SECONDS = 300
# A credential with less life than this left is worth a warning: an up renews it.
EXPIRY_WARNING_SECONDS = 86400
# How long the SSH connection of one read stays for the next (`status` twice in a row, `up` then `status`).
KEEP_CONNECTION_SECONDS = 60


def start_for(settings, address: str | None, boot_volume: str | None) -> subprocess.Popen | None:
    """Begin reading the killer's status file from the project's VM (its host key bound to the boot volume)."""
    if not address or not boot_volume:
        return None
    known_hosts = settings.runtime_dir / KNOWN_HOSTS_FILE
    return start(address, settings.ssh_user, settings.ssh_key, known_hosts, f"gpu-rent-{boot_volume}")


def ask(settings, resources: dict, address: str) -> dict | None:
    """The killer's status file from the project's VM at address, or None."""
    return finish(start_for(settings, address, resources.get("boot_volume")))


def start(address: str, user: str, key: Path, known_hosts: Path, host_alias: str) -> subprocess.Popen | None:
    """Begin reading the killer's status file (status asks while it reads the cloud); None if ssh cannot start."""
    command = [
        "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "StrictHostKeyChecking=yes",
        "-o", f'UserKnownHostsFile="{known_hosts}"', "-o", f"HostKeyAlias={host_alias}",
        *_shared_connection(host_alias), "-o", "LogLevel=ERROR", "-i", str(key), f"{user}@{address}",
        READ_COMMAND,
    ]  # fmt: skip
    try:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
    except OSError:
        return None


def _shared_connection(host_alias: str) -> list[str]:
    """OpenSSH's connection sharing, so a read soon after another skips the handshake (most of its time).

    The socket is named by the host key alias (the boot volume) as well as by %C: a floating IP that moves to
    another project's VM within the minute never reaches it over this project's checked connection. POSIX only:
    Windows' OpenSSH has no connection sharing.
    """
    if os.name != "posix":
        return []
    name = f"gpu-rent-ssh-{os.getuid()}"
    # a socket's path has 104 bytes with its NUL (macOS; Linux 108), and ssh first binds the path plus "." and 16
    # random characters: folder "/" 8-character prefix "-" %C (40) "." 16 leaves 68 for nothing else
    fits = [b for b in (tempfile.gettempdir(), "/tmp") if len(b) + len(name) + 68 < 104]
    folder = Path(fits[0]) / name if fits else None
    if folder is None:
        return []
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        if folder.stat().st_uid != os.getuid() or folder.stat().st_mode & 0o077:
            return []  # someone else's, or open to others: no shared connection through it
    except OSError:
        return []
    path = folder / f"{host_alias.removeprefix('gpu-rent-')[:8]}-%C"
    # a VM deleted or preempted under a kept connection: the master sees it gone within ~6 s and quits, so the
    # next read (an up bringing the server back) connects anew instead of waiting on a dead one
    return [
        "-o", "ControlMaster=auto", "-o", f"ControlPath={path}", "-o", f"ControlPersist={KEEP_CONNECTION_SECONDS}",
        "-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3",
    ]  # fmt: skip


def finish(proc: subprocess.Popen | None, timeout: float = 8) -> dict | None:
    """What a started read got, or None when SSH or the file was not there."""
    if proc is None:
        return None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    if proc.returncode != 0:
        return None
    vm_clock, _, report = out.partition("\n")
    try:
        ahead = round(float(vm_clock) - time.time())  # whole seconds, as date +%s tells them
        status = json.loads(report)
    except ValueError:
        return None
    return {**status, VM_CLOCK_AHEAD: ahead} if isinstance(status, dict) else None


def abandon(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.communicate()


def _clock(unix: float) -> str:
    return time.strftime("%H:%M", time.localtime(unix))


def _minutes(seconds: float) -> str:
    return f"{max(seconds, 0) / 60:.0f} min"


# How describe's line begins when nothing on the VM is known to be able to delete it: the report is missing or
# from the VM before, the credential refused or not proven, the timer silent. status says these in red, with
# the one command that ends the server.
UNGUARDED = ("no report", "NOT ARMED", "CREDENTIAL REFUSED", "UNPROVEN", "SILENT", "the idle-killer's report")


def unguarded(line: str) -> bool:
    """Whether describe's line says that no killer is known to be able to delete the server."""
    return line.startswith(UNGUARDED)


def describe(status: dict | None, now: float, server_id: str | None = None) -> str:
    """One line: when the VM goes, or what keeps it, or why the killer cannot act. server_id: the server
    the VM is now; a report naming another is from a killer still armed for the VM before."""
    try:
        return _describe(status, now, server_id)
    except (AttributeError, TypeError, ValueError):  # a damaged file on the VM: say so, never crash status
        return "the idle-killer's report on the VM is unreadable; its next tick writes it anew"


def _describe(status: dict | None, now: float, server_id: str | None) -> str:
    if not status:
        return "no report from the idle-killer on the VM (not armed yet, or SSH does not answer)"
    # The boot volume outlives a server: until an up arms the killer for the new one, its timer ticks with
    # the config of the VM before, whose DELETE would find that server gone and leave this one billing.
    armed_for = status.get("server_id")
    if server_id and armed_for and armed_for != server_id:
        return (
            f"NOT ARMED for this server: it is still armed for {armed_for}, the VM before this one, so nothing "
            "here deletes this VM when idle; an up that gets through arms it (`gpu-rent up`)"
        )
    credential = status.get("credential") or {}
    if credential.get("state") == "refused":
        return f"CREDENTIAL REFUSED, the VM cannot delete itself: {credential.get('message')}; `gpu-rent up` re-arms it"
    tick_at = float(status.get("tick_at") or 0)
    if not tick_at:
        return "armed, no tick yet"
    ahead = float(status.get(VM_CLOCK_AHEAD) or 0)  # the killer's times against the VM's clock, said in ours
    laptop_now, now = now, now + ahead
    if now - tick_at > SILENT_SECONDS:
        return f"SILENT since {_clock(tick_at - ahead)}: its timer does not run; `gpu-rent up` re-arms it"
    reason = status.get("reason") or "no reason given"
    if status.get("action") == "delete":
        return f"deleting this server: {reason} ({status.get('acted') or 'asked'})"
    fires_at = status.get("fires_at")
    # armed means proven: the killer's credential read this server through Nova (idle_killer.own_server)
    armed = "armed" if credential.get("state") == "ok" else "UNPROVEN (its credential has not been proven yet)"
    if credential.get("state") == "unreachable":
        armed = f"UNPROVEN (the cloud did not answer its proof: {credential.get('message')}; it tries again)"
    line = (
        f"{armed}, fires in {_minutes(float(fires_at) - now)} at {_clock(float(fires_at) - ahead)} ({reason})"
        if fires_at
        else f"{armed}, kept alive by: {reason}"
    )
    paid_until = status.get("paid_until")  # BILLING_HOUR: why it fires later than idle alone would
    if fires_at and paid_until:
        line += f"; the hour is paid until {_clock(float(paid_until) - ahead)}"
    backends = status.get("backends")  # "2 of 2 ComfyUI backends running", when SwarmUI listed them
    if backends and str(backends) not in reason:
        line += f"; {backends}"
    # the credential's expiry is Keystone's time: against this machine's clock, as every cloud time here
    return (
        line + _gpu_warning(status.get("gpu_error")) + _expiry_warning(status.get("credential_expires_at"), laptop_now)
    )


def _gpu_warning(error: object) -> str:
    """NVML's "Driver/library version mismatch": the NVIDIA userspace was upgraded under a loaded kernel module
    (the bootstrap holds those packages; an upgrade by hand does it). Until a reboot no GPU work is seen, so a
    job outside SwarmUI is only kept as capped trouble: said loudly, with the mend."""
    if not isinstance(error, str) or "mismatch" not in error.lower():
        return ""
    return (
        "; GPU WORK NOT SEEN: the NVIDIA driver and its library differ (an upgrade without a reboot), so a job "
        "outside SwarmUI is kept only up to the trouble cap; a reboot mends it (`gpu-rent ssh`, `sudo reboot`)"
    )


def _expiry_warning(expires_at: str | None, now: float) -> str:
    if not expires_at:
        return ""
    try:
        expires = calendar.timegm(time.strptime(expires_at.split(".")[0].rstrip("Z"), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return ""
    if expires - now < EXPIRY_WARNING_SECONDS:
        return f"; its credential expires at {_clock(expires)} (`gpu-rent up` renews it)"
    return ""
