"""Our push and pull (gpu_rent/to_vm/sync.py) against rsync over OpenSSH, both through a real sshd on loopback.

Usage (as root, from the repository root; needs openssh-server and rsync):
    .venv/bin/python bench/sync.py [MEGABYTES]     # the big file, default 1024

Starts sshd on 127.0.0.1, writes a big file of random bytes and a tree of 1,000 small files (1-8 KB,
in nested folders), then measures, each twice and taking the better (both sides read the same file
from the page cache, every copy goes into an empty folder):
- the big file pushed and pulled by `rsync -a -e ssh` and by us, login included on both sides;
- the first push of the tree and its unchanged re-push, on an open connection.
Goals: throughput >= 0.8x rsync's; the unchanged re-push <= 0.05x of the first push.
Every exec starts the login shell, so one exec is the floor of a re-push (its listing): the loopback
sshd gives its sessions an empty HOME, as root on a fresh VM has, so this machine's ~/.bashrc (pyenv
init, ~100 ms) is not in it.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import report
from gpu_rent.to_vm import sync
from gpu_rent.to_vm.ssh import Target, connect
from tests.loopback_sshd import Sshd, missing

RUNS = 2
TREE_FILES = 1000


def make_big(path: Path, megabytes: int) -> None:
    block = os.urandom(1024 * 1024)  # nothing on the way compresses, nor does rsync match blocks into an empty folder
    with open(path, "wb") as f:
        for _ in range(megabytes):
            f.write(block)


def make_tree(root: Path) -> None:
    rng = random.Random(7)
    for i in range(TREE_FILES):
        folder = root / f"group {i % 10}" / (f"sub {i % 4}" if i % 3 else "") / ("deep" if i % 7 == 0 else "")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"file {i} ✓.txt").write_bytes(rng.randbytes(rng.randint(1024, 8192)))


def fresh(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)


def rsync(sshd: Sshd, source: str, dest: str) -> float:
    ssh = f"ssh -p {sshd.port} -i {sshd.client_key} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
    started = time.perf_counter()
    subprocess.run(["rsync", "-a", "-e", ssh, source, dest], check=True, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


async def ours(target: Target, action) -> float:
    """Seconds for login, the action, logout."""
    started = time.perf_counter()
    conn = await connect(target)
    try:
        await action(conn)
    finally:
        conn.close()
        await conn.wait_closed()
    return time.perf_counter() - started


async def tree_pushes(target: Target, src: Path, dst: Path, lock: str) -> tuple[list[float], list[float], float]:
    """(first push seconds, unchanged re-push seconds, one exec's seconds), on one open connection."""
    conn = await connect(target)
    try:
        execs = []
        for _ in range(3):
            started = time.perf_counter()
            await conn.run("true", check=True)
            execs.append(time.perf_counter() - started)
        first, again = [], []
        for _ in range(RUNS):
            fresh(dst)
            result = await sync.push(conn, [(src, str(dst))], lock=lock)
            assert result.files_sent == TREE_FILES, result
            first.append(result.seconds)
            result = await sync.push(conn, [(src, str(dst))], lock=lock)
            assert result.files_sent == 0 and result.files_skipped == TREE_FILES, result
            again.append(result.seconds)
    finally:
        conn.close()
    return first, again, min(execs)


def report_tree(label: str, first: list[float], again: list[float], exec_seconds: float) -> None:
    print(f"tree of {TREE_FILES} files of 1-8 KB on an open connection, better of {RUNS}, {label}")
    print(f"  one exec of `true`  {exec_seconds * 1000:6.0f} ms (the floor of a re-push)")
    print(f"  first push        {min(first):6.3f} s   ({', '.join(f'{v:.3f}' for v in first)})")
    print(f"  unchanged re-push {min(again):6.3f} s   ({', '.join(f'{v:.3f}' for v in again)})")
    print(f"RATIO sync unchanged re-push vs first push, {label}: {min(again) / min(first):.2f}x (goal <= 0.05x)")
    report("unchanged-re-push", min(again) / min(first), "<= 0.05", f"first push ({label})")


async def measure(sshd: Sshd, tmp: Path, megabytes: int) -> None:
    target = Target("127.0.0.1", "root", sshd.client_key, tmp / "known_hosts", "bench", port=sshd.port)
    src, dst, back = tmp / "src", tmp / "dst", tmp / "back"
    (src / "big").mkdir(parents=True)
    big = src / "big" / "big.bin"
    make_big(big, megabytes)
    make_tree(src / "tree")
    size = big.stat().st_size
    subprocess.run(["cat", str(big)], stdout=subprocess.DEVNULL, check=True)  # warm for both
    lock = str(tmp / "seeding")

    speeds: dict[str, list[float]] = {"rsync push": [], "ours push": [], "rsync pull": [], "ours pull": []}
    for _ in range(RUNS):
        fresh(dst)
        speeds["rsync push"].append(size / 1e6 / rsync(sshd, str(big), f"root@127.0.0.1:{dst}/"))
        fresh(dst)
        seconds = await ours(target, lambda c: sync.push(c, [(src / "big", str(dst))], lock=lock))
        speeds["ours push"].append(size / 1e6 / seconds)
        assert (dst / "big.bin").stat().st_size == size
        fresh(back)
        speeds["rsync pull"].append(size / 1e6 / rsync(sshd, f"root@127.0.0.1:{big}", f"{back}/"))
        fresh(back)
        seconds = await ours(target, lambda c: sync.pull(c, str(src / "big"), back))
        speeds["ours pull"].append(size / 1e6 / seconds)
        assert (back / "big.bin").stat().st_size == size
    shutil.rmtree(dst)
    shutil.rmtree(back)

    best = {name: max(values) for name, values in speeds.items()}
    print(f"{size / 2**20:.0f} MiB file of random bytes, loopback sshd, login included, better of {RUNS}")
    for name, value in best.items():
        print(f"{name:<11} {value:>6.0f} MB/s   ({', '.join(f'{v:.0f}' for v in speeds[name])})")
    print(f"RATIO sync throughput vs rsync: {best['ours push'] / best['rsync push']:.2f}x (goal >= 0.8x)")
    print(f"RATIO sync pull throughput vs rsync: {best['ours pull'] / best['rsync pull']:.2f}x (goal >= 0.8x)")
    report("push-throughput", best["ours push"] / best["rsync push"], ">= 0.8", "rsync -a -e ssh push")
    report("pull-throughput", best["ours pull"] / best["rsync pull"], ">= 0.8", "rsync -a -e ssh pull")
    report_tree("login shell without rc files, as on the VM", *await tree_pushes(target, src / "tree", dst, lock))


def main() -> int:
    reason = missing() or (None if shutil.which("rsync") else "no rsync (apt-get install rsync)")
    if reason:
        print(f"bench/sync.py: {reason}")
        return 2
    megabytes = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    with tempfile.TemporaryDirectory() as tmp, Sshd(Path(tmp) / "sshd") as sshd:
        asyncio.run(measure(sshd, Path(tmp), megabytes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
