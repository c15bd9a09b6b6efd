"""gpu_rent/to_vm/sync.py (push, pull) against a real OpenSSH sshd on 127.0.0.1: the "VM" folders are folders under tmp.

Needs root and openssh-server (tests/loopback_sshd.py); skipped without them, failed under CI.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from gpu_rent.to_vm import sync
from gpu_rent.to_vm.ssh import Target, connect

MiB = 1024 * 1024
T0 = 1_700_000_000  # an mtime in whole seconds
NAMES = [
    "модель ✓.safetensors",
    "with space/a b c.txt",
    "line\nbreak.txt",
    "back\\slash.txt",
    "-starts with a dash",
    "empty",
    "a/b/c/deep.bin",
    "x" * 230 + ".txt",  # its partial's name would be longer than 255 bytes
    "nested/big one.bin",  # >= sync.BIG: goes through an exec stream
]


@pytest.fixture(autouse=True)
def no_big_leftovers(tmp_path):
    """pytest keeps the last runs' tmp folders: not with hundreds of MB in them."""
    yield
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.stat().st_size > MiB:
            path.unlink()


@pytest.fixture
def target(sshd, tmp_path):
    return Target("127.0.0.1", "root", sshd.client_key, tmp_path / "known_hosts", "sync-test", port=sshd.port)


def run(target: Target, action):
    async def main():
        conn = await connect(target)
        try:
            return await action(conn)
        finally:
            conn.close()
            await conn.wait_closed()

    return asyncio.run(main())


def push(target, pairs, lock: Path, **options) -> sync.SyncResult:
    return run(target, lambda conn: sync.push(conn, pairs, lock=str(lock), **options))


def pull(target, remote: Path, local: Path, **options) -> sync.SyncResult:
    return run(target, lambda conn: sync.pull(conn, str(remote), local, **options))


def write(path: Path, data: bytes, mtime: int = T0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))
    return path


def content(name: str) -> bytes:
    if name == "empty":
        return b""
    if name.endswith("big one.bin"):
        return os.urandom(sync.BIG + 12345)
    return f"bytes of {name}\n".encode() * 7


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """relative path -> (content, whole-second mtime) of every file under root."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), int(p.stat().st_mtime)) for p in root.rglob("*") if p.is_file()
    }


def partials(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(sync.PART)]


def big_file(path: Path, megabytes: int) -> str:
    """Real random bytes (a repeated random block); its sha256."""
    block, digest = os.urandom(MiB), hashlib.sha256()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for _ in range(megabytes):
            f.write(block)
            digest.update(block)
    os.utime(path, (T0, T0))
    return digest.hexdigest()


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def test_push_copies_every_kind_of_name_into_a_new_folder_and_skips_a_missing_local_folder(target, tmp_path):
    models = tmp_path / "Models"
    for name in NAMES:
        write(models / name, content(name))
    vm = tmp_path / "vm" / "mnt" / "swarm_data"
    result = push(target, [(models, f"{vm}/Models"), (tmp_path / "Wildcards", f"{vm}/Data/Wildcards")], tmp_path / "l")
    assert tree(vm / "Models") == tree(models)
    assert (result.files_sent, result.files_skipped, result.files_resumed) == (len(NAMES), 0, 0)
    assert result.bytes_sent == sum(len(content) for content, _ in tree(models).values())
    assert result.missing == [str(tmp_path / "Wildcards")]
    assert not (vm / "Data").exists()
    assert partials(vm) == []


def test_unchanged_files_are_not_sent_again_and_a_changed_one_is(target, tmp_path):
    local, vm = tmp_path / "workflows", tmp_path / "vm" / "CustomWorkflows"
    for name in NAMES:
        write(local / name, content(name))
    push(target, [(local, str(vm))], tmp_path / "l")

    again = push(target, [(local, str(vm))], tmp_path / "l")
    assert (again.files_sent, again.bytes_sent, again.files_skipped) == (0, 0, len(NAMES))

    write(local / "a/b/c/deep.bin", b"new and longer content", T0 + 60)
    write(local / "empty", b"", T0 + 1)  # same size, another mtime
    changed = push(target, [(local, str(vm))], tmp_path / "l")
    assert (changed.files_sent, changed.files_skipped) == (2, len(NAMES) - 2)
    assert changed.bytes_sent == len(b"new and longer content")
    assert tree(vm) == tree(local)


def test_pull_brings_only_new_files_and_never_deletes_any(target, tmp_path):
    vm, output = tmp_path / "vm" / "Output", tmp_path / "Output"
    for name in NAMES:
        write(vm / name, content(name))
    write(output / "mine only.png", b"made here")

    first = pull(target, vm, output)
    assert (first.files_sent, first.files_skipped) == (len(NAMES), 0)
    assert tree(output) == {**tree(vm), "mine only.png": (b"made here", T0)}

    write(vm / "2026-11-30/new image.png", b"\x89PNG new", T0 + 5)
    (vm / "empty").unlink()
    second = pull(target, vm, output)
    assert (second.files_sent, second.files_skipped, second.bytes_sent) == (1, len(NAMES) - 1, len(b"\x89PNG new"))
    assert (output / "2026-11-30/new image.png").read_bytes() == b"\x89PNG new"
    assert (output / "empty").exists() and (output / "mine only.png").exists()
    assert partials(output) == []

    nothing = pull(target, tmp_path / "vm" / "no such folder", output)
    assert nothing.missing == [str(tmp_path / "vm" / "no such folder")] and nothing.files_sent == 0


def test_a_1_gib_file_arrives_byte_identical_under_the_seeding_lock_kept_fresh(target, tmp_path):
    source = tmp_path / "Models" / "huge.safetensors"
    digest = big_file(source, 1024)
    vm = tmp_path / "vm" / "Models"
    lock = tmp_path / "run" / "gpu-rent" / "seeding"  # its folder does not exist yet
    seen: list[tuple[float, int, int]] = []  # (time, lock value, lock inode)
    calls: list[tuple[int, int, str]] = []

    def progress(done: int, total: int, name: str) -> None:
        calls.append((done, total, name))
        if not seen or time.time() - seen[-1][0] > 0.05:
            seen.append((time.time(), int(lock.read_text()), lock.stat().st_ino))

    started = time.time()
    try:
        result = push(target, [(source.parent, str(vm))], lock, on_progress=progress, lock_refresh=0.2)
        assert sha256(vm / "huge.safetensors") == digest
        assert int((vm / "huge.safetensors").stat().st_mtime) == T0
    finally:
        source.unlink()
        (vm / "huge.safetensors").unlink(missing_ok=True)
    assert (result.files_sent, result.bytes_sent) == (1, 1024 * MiB)
    assert calls[0] == (0, 1024 * MiB, "") and calls[-1] == (1024 * MiB, 1024 * MiB, "huge.safetensors")
    assert len(calls) > 100  # often enough for a progress bar
    assert all(value >= int(started) + sync.LOCK_SECONDS - 2 for _, value, _ in seen)  # taken before the first byte
    assert len({inode for _, _, inode in seen}) >= 2  # rewritten while it ran
    assert int(started) <= int(lock.read_text()) <= time.time() + 1  # released: "free from now"


def test_a_longer_seeding_lock_held_by_another_seeding_is_neither_shortened_nor_released(target, tmp_path):
    lock = write(tmp_path / "seeding", f"{int(time.time()) + 5000}\n".encode())
    write(tmp_path / "Models" / "m.bin", b"model")
    push(target, [(tmp_path / "Models", str(tmp_path / "vm"))], lock)
    assert int(lock.read_text()) >= int(time.time()) + 4990


def interrupted_push(target, sshd, source: Path, final: Path, lock: Path) -> None:
    """Push until about a third of `source` is sent, then kill the SSH sessions as a dropped network would."""
    size = source.stat().st_size

    def progress(done: int, total: int, name: str) -> None:
        assert not final.exists()  # never a half file under the final name
        if done >= size // 3:
            assert len(partials(final.parent)) == 1
            sshd.kill_sessions()

    with pytest.raises(sync.SyncError, match=r"connection to the VM was lost .*run it again, it resumes"):
        push(target, [(source.parent, str(final.parent))], lock, on_progress=progress)
    assert not final.exists()
    assert 0 < partials(final.parent)[0].stat().st_size < size


def test_an_interrupted_push_resumes_from_the_partial(target, sshd, tmp_path):
    source, final = tmp_path / "Models" / "model ✓.bin", tmp_path / "vm" / "Models" / "model ✓.bin"
    digest = big_file(source, 160)
    interrupted_push(target, sshd, source, final, tmp_path / "l")
    left = partials(final.parent)[0].stat().st_size

    def progress(done: int, total: int, name: str) -> None:
        assert total == source.stat().st_size - left
        if done < total:
            assert not final.exists()

    result = push(target, [(source.parent, str(final.parent))], tmp_path / "l", on_progress=progress)
    assert (result.files_sent, result.files_resumed) == (1, 1)
    assert result.bytes_sent == source.stat().st_size - left < source.stat().st_size
    assert sha256(final) == digest and int(final.stat().st_mtime) == T0
    assert partials(final.parent) == []


def test_a_source_changed_after_an_interruption_is_sent_from_zero(target, sshd, tmp_path):
    source, final = tmp_path / "Models" / "model.bin", tmp_path / "vm" / "Models" / "model.bin"
    big_file(source, 64)
    interrupted_push(target, sshd, source, final, tmp_path / "l")
    with open(source, "ab") as f:
        f.write(b"a new version")
    os.utime(source, (T0 + 100, T0 + 100))

    result = push(target, [(source.parent, str(final.parent))], tmp_path / "l")
    assert (result.files_sent, result.files_resumed, result.bytes_sent) == (1, 0, source.stat().st_size)
    assert sha256(final) == sha256(source)
    assert partials(final.parent) == []  # the old version's partial is gone too


def test_an_interrupted_pull_resumes_from_the_partial(target, tmp_path):
    remote, final = tmp_path / "vm" / "Output" / "video.mp4", tmp_path / "Output" / "video.mp4"
    digest = big_file(remote, 160)

    async def cancelled(conn):
        task = asyncio.current_task()

        def progress(done: int, total: int, name: str) -> None:
            assert not final.exists()
            if done >= total // 3:
                task.cancel()

        await sync.pull(conn, str(remote.parent), final.parent, on_progress=progress)

    with pytest.raises(asyncio.CancelledError):
        run(target, cancelled)
    assert not final.exists()
    [partial] = partials(final.parent)
    left = partial.stat().st_size
    assert 0 < left < remote.stat().st_size

    result = pull(target, remote.parent, final.parent)
    assert (result.files_sent, result.files_resumed) == (1, 1)
    assert result.bytes_sent == remote.stat().st_size - left
    assert sha256(final) == digest and int(final.stat().st_mtime) == T0
    assert partials(final.parent) == []


def test_checksum_mode_finds_a_change_that_kept_size_and_mtime(target, tmp_path):
    local, vm = tmp_path / "Wildcards", tmp_path / "vm" / "Data" / "Wildcards"
    names = ["colors.txt", "line\nbreak.txt", "back\\slash.txt", "sub dir/ünïcode.txt"]
    for name in names:
        write(local / name, b"red green blue\n")
    push(target, [(local, str(vm))], tmp_path / "l")
    for name in ("line\nbreak.txt", "back\\slash.txt"):
        write(local / name, b"RED GREEN BLUE\n")  # same size, same mtime

    plain = push(target, [(local, str(vm))], tmp_path / "l")
    assert plain.files_sent == 0
    hashed = push(target, [(local, str(vm))], tmp_path / "l", checksum=True)
    assert (hashed.files_sent, hashed.files_skipped) == (2, 2)
    assert tree(vm) == tree(local)

    write(vm / "colors.txt", b"RED GREEN BLUE\n")
    assert pull(target, vm, local).files_sent == 0
    back = pull(target, vm, local, checksum=True)
    assert (back.files_sent, back.files_skipped) == (1, 3)
    assert (local / "colors.txt").read_bytes() == b"RED GREEN BLUE\n"


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "small disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=False).returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.parametrize("size", [3 * MiB, sync.BIG + MiB], ids=["sftp", "stream"])
def test_a_full_disk_on_the_vm_is_named_and_no_half_file_is_left_under_the_final_name(
    target, tmp_path, small_disk, size
):
    write(tmp_path / "Models" / "too big.bin", os.urandom(size))
    with pytest.raises(sync.SyncError, match=r"^the VM's disk is full \(.*too big.bin\)"):
        push(target, [(tmp_path / "Models", str(small_disk / "Models"))], tmp_path / "l")
    assert not (small_disk / "Models" / "too big.bin").exists()


def test_partial_names_stay_within_255_bytes():
    assert sync.partial_name("a.bin", 10, T0) == f".a.bin.10-{T0}.gpu-rent-part"
    long = sync.partial_name("я" * 120, 10, T0)
    assert len(long.encode()) <= 255 and long.endswith(f".10-{T0}.gpu-rent-part")
