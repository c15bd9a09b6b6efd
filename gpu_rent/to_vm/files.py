"""push and pull-output for the CLI: the project's folders against the data volume, over one SSH login.

The copying itself (only what changed, resumable, atomic, the seeding lock) is gpu_rent/to_vm/sync.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from gpu_rent.on_vm import paths
from gpu_rent.project.settings import Settings
from gpu_rent.to_vm import ssh, sync

DATA_MOUNT = paths.DATA_MOUNT  # the data volume on the VM (roles/data_volume)
OUTPUT = "Output"  # SwarmUI's outputs, on the data volume and in the project folder


def push_pairs(settings: Settings) -> list[tuple[Path, str]]:
    """PUSH_FOLDERS as (local folder, absolute folder on the VM)."""
    return [(settings.project_dir / local, f"{DATA_MOUNT}/{remote}") for local, remote in settings.push_folders]


def output_dir(settings: Settings) -> Path:
    return settings.project_dir / OUTPUT


async def _with_vm(target: ssh.Target, work):
    async with await ssh.connect(target) as conn:
        return await work(conn)


def push(settings: Settings, target: ssh.Target, checksum: bool, on_progress) -> sync.SyncResult:
    pairs = push_pairs(settings)
    return asyncio.run(_with_vm(target, lambda c: sync.push(c, pairs, checksum=checksum, on_progress=on_progress)))


def pull_output(settings: Settings, target: ssh.Target, checksum: bool, on_progress) -> sync.SyncResult:
    remote, local = f"{DATA_MOUNT}/{OUTPUT}", output_dir(settings)
    return asyncio.run(
        _with_vm(target, lambda c: sync.pull(c, remote, local, checksum=checksum, on_progress=on_progress))
    )


def summary(result: sync.SyncResult) -> str:
    megabytes = result.bytes_sent / 1e6
    resumed = f", {result.files_resumed} resumed" if result.files_resumed else ""
    rate = f" at {megabytes / result.seconds:.0f} MB/s" if result.seconds and megabytes >= 10 else ""
    return (
        f"{result.files_sent} file{'s' * (result.files_sent != 1)} ({megabytes:.1f} MB{rate}{resumed}), "
        f"{result.files_skipped} unchanged, {result.seconds:.1f}s"
    )
