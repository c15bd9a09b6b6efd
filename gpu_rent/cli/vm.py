"""The commands that work on the running VM over SSH: push, pull-output, ssh and logs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gpu_rent.cli.common import (
    ProjectOption,
    fail,
    files,
    handled,
    load_settings,
    sync,
    tells_when_long,
    vm_ssh,
    vm_target,
)
from gpu_rent.cli.console import ExitCode, console, error, note, transfer_progress
from gpu_rent.project.state import StateStore
from gpu_rent.util.lazy import lazy

# loaded when ssh or logs first uses them: the other commands start without them
asyncssh = lazy("asyncssh")
asyncio = lazy("asyncio")  # the event loop of ssh and logs; notify has its own

ChecksumOption = Annotated[
    bool, typer.Option("--checksum", help="Compare sha256 instead of size and modification time (slower).")
]


def _transfer_errors() -> tuple[type[Exception], ...]:
    """SSH to the VM or a copy failed: one line (the message says why), exit 1 like any failed step."""
    return (vm_ssh.SshError, sync.SyncError)


@tells_when_long("push")
def push(project: ProjectOption = Path("."), checksum: ChecksumOption = False) -> None:
    """Copy the project's Models, Wildcards and workflows folders (PUSH_FOLDERS) to the data volume.

    Only new and changed files travel; an interrupted push resumes; the idle-killer waits for it.
    """
    settings = load_settings(project)
    target = vm_target(settings)
    try:
        with StateStore(settings.project_dir).lock("push"), transfer_progress("pushing") as show:
            result = files.push(settings, target, checksum, show)
    except (*handled(), *_transfer_errors()) as e:
        raise fail(e) from None
    for missing in result.missing:
        note(f"{missing}: no such folder here, skipped")
    console.print(f"[green]pushed[/]: {files.summary(result)}")


@tells_when_long("pull-output")
def pull_output(project: ProjectOption = Path("."), checksum: ChecksumOption = False) -> None:
    """Copy new outputs from the VM into ./Output; nothing is deleted on either side; resumable."""
    settings = load_settings(project)
    target = vm_target(settings)
    try:
        with transfer_progress("pulling Output") as show:
            result = files.pull_output(settings, target, checksum, show)
    except (*handled(), *_transfer_errors()) as e:
        raise fail(e) from None
    if result.missing:
        note("the VM has no Output folder yet: nothing generated")
    console.print(f"[green]pulled[/] to {files.output_dir(settings)}: {files.summary(result)}")


def ssh_command(ctx: typer.Context, project: ProjectOption = Path(".")) -> None:
    """A shell on the VM (or: gpu-rent ssh -- COMMAND), as root, with the project's key and pinned host key."""
    import shutil
    import subprocess

    settings = load_settings(project)
    target = vm_target(settings)
    if not shutil.which("ssh"):
        error("no ssh client on this machine: install OpenSSH (Windows: Settings → Optional features → OpenSSH Client)")
        raise typer.Exit(ExitCode.FAILED)
    if not vm_ssh.pinned_keys(target.known_hosts, target.alias):
        try:
            asyncio.run(vm_ssh.run(target, "true"))  # pins the host key the first time, as every command does
        except vm_ssh.SshError as e:
            error(str(e))
            raise typer.Exit(ExitCode.FAILED) from None
    command = [
        "ssh", "-i", str(target.key), "-p", str(target.port), "-o", "StrictHostKeyChecking=yes",
        "-o", f'UserKnownHostsFile="{target.known_hosts}"', "-o", f"HostKeyAlias={target.alias}",
        "-o", "LogLevel=ERROR", f"{target.user}@{target.address}", *ctx.args,
    ]  # fmt: skip
    raise typer.Exit(subprocess.call(command))


def logs(
    project: ProjectOption = Path("."),
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until Ctrl+C.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", min=1, help="How many recent lines.")] = 100,
    unit: Annotated[str, typer.Option("--unit", "-u", help="swarmui, killer or all.", show_default=True)] = "all",
) -> None:
    """The journal of SwarmUI and the idle-killer on the VM."""
    units = {"swarmui": ["swarmui"], "killer": ["gpu-rent-idle-killer"], "all": ["swarmui", "gpu-rent-idle-killer"]}
    if unit not in units:
        error(f"--unit {unit}: not one of swarmui, killer, all")
        raise typer.Exit(ExitCode.BAD_INPUT)
    settings = load_settings(project)
    target = vm_target(settings)
    command = "journalctl --no-pager -o short-iso -n {} {} {}".format(
        lines, " ".join(f"-u {u}" for u in units[unit]), "-f" if follow else ""
    )
    try:
        code = asyncio.run(_stream(target, command))
    except vm_ssh.SshError as e:
        error(str(e))
        raise typer.Exit(ExitCode.FAILED) from None
    except (asyncssh.Error, OSError) as e:  # the VM went (the idle-killer, a stop) while following
        error(f"the connection to the VM ended: {' '.join(str(e).split()) or type(e).__name__}")
        raise typer.Exit(ExitCode.FAILED) from None
    raise typer.Exit(code)


async def _stream(target: vm_ssh.Target, command: str) -> int:
    async with await vm_ssh.connect(target) as conn, conn.create_process(command, stderr=asyncssh.STDOUT) as proc:
        async for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
        await proc.wait()
        return proc.exit_status or 0
