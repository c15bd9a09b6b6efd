"""`gpu-rent push` and `gpu-rent pull-output`: copy folders to and from the VM over one SSH connection.

Only what changed is sent: a file is skipped when the other side has it with the same size and the
same mtime in whole seconds (with checksum=True: the same sha256). The remote tree is listed in one
round trip (`find -printf` over an exec channel), never with a stat per file. Nothing is ever deleted
on either side, apart from our own stale partial files.

Each file is written to a partial file beside its final name, `.<name>.<size>-<mtime>.gpu-rent-part`,
fsync'd, given the source's mtime and renamed over the final name: a half file never shows under the
final name. The partial's name carries the source's size and mtime, so an interrupted copy continues
from the partial's size next time while the source is unchanged, and starts again from zero when it
changed. Names too long for that carry a hash of the name instead.

How the bytes travel, decided by measurement: 1 GiB of random bytes through a loopback OpenSSH sshd
on a 2-core machine, our side with AES-GCM, each way tried in the same run as rsync, MB/s:
    push: rsync -e ssh 410-475; asyncssh SFTP put (255 KiB blocks, 64-256 requests) 530-640;
          `cat >> partial` on an exec channel 800-860
    pull: rsync -e ssh 505-515; asyncssh SFTP get 680-730; `tail -c +N` on an exec channel 900-990
so files from BIG bytes on stream through an exec channel, which also makes resuming simple (the
partial only ever grows, in order). The receive window and packet size of a pull (2-32 MiB, 32-256
KiB) made no difference beyond the noise. Every exec starts the login shell on the VM (a few ms;
85-190 ms on the test machine, whose root ~/.bashrc runs `pyenv init`), so smaller files go through
one SFTP session, SMALL_PARALLEL at a time: 1,000 files of 1-8 KB in 0.6 s, 0.9 s with the fsync each.
A push or pull of an unchanged tree costs one exec: the listing.

During a push the VM's idle-killer is kept away with the seeding lock (gpu_rent/on_vm/idle_killer.py):
taken for LOCK_SECONDS (by the VM's clock) before the first byte is sent or hashed (a push with
nothing to send does not take it), refreshed every LOCK_REFRESH_SECONDS, released
at the end by writing the VM's current time into it. A longer lock someone else holds is never
shortened, and one that is not ours any more is not released.

One file of ~760 lines on purpose: push and pull share the plan, the partial-file naming, the lock and
the small/big split measured above, and each half mirrors the other; apart, a change to one rule (say,
the partial's name) would have to be made twice in step.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import re
import shlex
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from gpu_rent.on_vm import paths

SEEDING_LOCK = paths.SEEDING_LOCK
LOCK_SECONDS = 600
LOCK_REFRESH_SECONDS = 120
PART = ".gpu-rent-part"
BIG = 4 * 1024 * 1024  # from here on a file streams through its own exec channel and resumes
SMALL_PARALLEL = 16  # smaller files in flight on the SFTP session at once (each held in memory)
BIG_PARALLEL = 2  # streams at once: the next one's channel opens while one is sending
CHUNK = 1024 * 1024
WINDOW = 8 * 1024 * 1024  # the receive window of a pull's stream
PACKET = 256 * 1024
HASH_BATCH = 256  # names per remote sha256sum

Progress = Callable[[int, int, str], None]
_PARTIAL = re.compile(r"\.(.+)\.(\d+)-(-?\d+)" + re.escape(PART))
_LOST = (
    asyncssh.ConnectionLost,
    asyncssh.DisconnectError,
    asyncssh.SFTPConnectionLost,
    asyncssh.SFTPNoConnection,
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
)


class SyncError(Exception):
    """A push or pull failed; the message says why in one line."""


@dataclass
class SyncResult:
    files_sent: int = 0
    files_skipped: int = 0  # unchanged: the other side has them already
    bytes_sent: int = 0  # what went over the wire (a resumed file counts from where it resumed)
    files_resumed: int = 0  # files continued from a partial an interrupted run left
    seconds: float = 0.0
    missing: list[str] = field(default_factory=list)  # source folders that do not exist: skipped


@dataclass(frozen=True)
class _File:
    size: int
    mtime: int  # whole seconds


@dataclass
class _Tree:
    files: dict[str, _File] = field(default_factory=dict)  # relative posix path -> size, mtime
    partials: dict[str, int] = field(default_factory=dict)  # relative path of a partial -> its size


@dataclass
class _Job:
    rel: str
    size: int
    mtime: int
    partial: str  # relative path of its partial file
    offset: int = 0  # bytes already in the partial
    stale: list[str] = field(default_factory=list)  # partials of an older version of the source


# ------------------------------------------------------------------ names and trees


def partial_name(name: str, size: int, mtime: int) -> str:
    """The partial file of `name` (a base name) for a source of this size and mtime."""
    stamp = f".{size}-{mtime}{PART}"
    if len(f".{name}{stamp}".encode()) > 255:
        name = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return f".{name}{stamp}"


def _is_partial(name: str) -> bool:
    return name.startswith(".") and name.endswith(PART)


def _partial_rel(rel: str, size: int, mtime: int) -> str:
    folder, _, name = rel.rpartition("/")
    return f"{folder}/{partial_name(name, size, mtime)}" if folder else partial_name(name, size, mtime)


def _label(rel: str) -> tuple[str, str] | None:
    """(folder, name or name hash) a partial belongs to; None for a file that is not a partial."""
    folder, _, name = rel.rpartition("/")
    m = _PARTIAL.fullmatch(name)
    return (folder, m.group(1)) if m else None


def _add(tree: _Tree, rel: str, size: int, mtime: int) -> None:
    if _is_partial(rel.rpartition("/")[2]):
        tree.partials[rel] = size
    else:
        tree.files[rel] = _File(size, mtime)


def _local_tree(root: Path) -> _Tree:
    """Every file under root (symlinks followed, loops cut), partials apart."""
    tree = _Tree()
    seen: set[tuple[int, int]] = set()
    for folder, dirs, names in os.walk(root, followlinks=True):
        st = os.stat(folder)
        if (st.st_dev, st.st_ino) in seen:
            dirs[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        base = Path(folder).relative_to(root).as_posix()
        for name in names:
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
                (base + "/" + name).encode("utf-8")  # a name the VM cannot be told is left out
            except (OSError, UnicodeEncodeError):
                continue
            if stat.S_ISREG(st.st_mode):
                _add(tree, name if base == "." else f"{base}/{name}", st.st_size, st.st_mtime_ns // 10**9)
    return tree


_LIST = r"""for d in {roots}; do
  if [ -d "$d" ]; then printf '/\0'; find -H "$d" -type f -printf '%s %T@ %P\0' || exit 1
  else printf '//\0'; fi
done"""


async def _remote_trees(conn, roots: list[str]) -> list[_Tree | None]:
    """The trees under the remote roots (None: no such folder), all in one exec."""
    if not roots:
        return []
    script = _LIST.format(roots=" ".join(shlex.quote(r) for r in roots))
    done = await _run(conn, script, "listing the folders on the VM")
    trees: list[_Tree | None] = []
    for record in done.stdout.split(b"\0")[:-1]:
        if record in (b"/", b"//"):
            trees.append(_Tree() if record == b"/" else None)
            continue
        size, stamp, rel = record.split(b" ", 2)
        try:
            name = rel.decode("utf-8")
        except UnicodeDecodeError:
            continue  # a name that is not UTF-8 cannot be named back to the VM
        _add(trees[-1], name, int(size), int(stamp.partition(b".")[0]))  # whole seconds, without float rounding
    if len(trees) != len(roots):
        raise SyncError("listing the folders on the VM gave a garbled answer: run it again")
    return trees


def _plan(source: _Tree, dest: _Tree) -> tuple[list[_Job], list[tuple[str, int]]]:
    """What to copy (with offsets into partials the destination has) and which same-size files to hash."""
    stale: dict[tuple[str, str], list[str]] = {}
    for rel in dest.partials:
        label = _label(rel)
        if label:
            stale.setdefault(label, []).append(rel)
    jobs, same_size = [], []
    for rel, f in sorted(source.files.items()):
        have = dest.files.get(rel)
        if have is not None and have.size == f.size:
            if have.mtime == f.mtime:
                same_size.append((rel, 1))
                continue
            same_size.append((rel, 0))
        part = _partial_rel(rel, f.size, f.mtime)
        got = dest.partials.get(part, 0)
        offset = got if f.size >= BIG and got <= f.size else 0
        label = _label(part)
        jobs.append(_Job(rel, f.size, f.mtime, part, offset, [p for p in stale.get(label, []) if p != part]))
    return jobs, same_size


# ------------------------------------------------------------------ errors


def _first_line(text: bytes | str | None) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else ""


def _remote_error(what: str, stderr: bytes | str | None, status: int | None = None) -> SyncError:
    line = _first_line(stderr)
    low = line.lower()
    if "no space left" in low or "disk quota" in low:
        return SyncError(f"the VM's disk is full ({what}): free space there, then run it again")
    if "permission denied" in low or "operation not permitted" in low:
        return SyncError(f"permission denied on the VM ({what}): {line}")
    if "read-only file system" in low:
        return SyncError(f"the VM's disk is read-only ({what})")
    return SyncError(f"{what} failed on the VM: {line or f'exit status {status}'}")


def _local_error(what: str, e: OSError) -> SyncError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return SyncError(f"this computer's disk is full ({what}): free space, then run it again")
    if isinstance(e, PermissionError):
        return SyncError(f"permission denied on this computer ({what}): {e.filename}")
    return SyncError(f"{what} failed on this computer: {e.strerror or e}")


def _lost(what: str) -> SyncError:
    return SyncError(f"the connection to the VM was lost ({what}): run it again, it resumes where it stopped")


@contextlib.asynccontextmanager
async def _remote(conn, what: str):
    """asyncssh errors as SyncError, a lost connection called so."""
    try:
        yield
    except SyncError:
        raise
    except asyncssh.SFTPError as e:
        if isinstance(e, _LOST) or conn.is_closed():
            raise _lost(what) from None
        if isinstance(e, asyncssh.SFTPPermissionDenied):
            raise SyncError(f"permission denied on the VM ({what})") from None
        if isinstance(e, asyncssh.SFTPNoSpaceOnFilesystem):
            raise _remote_error(what, "no space left") from None
        raise SyncError(f"{what} failed on the VM: {e.reason}") from None
    except (asyncssh.Error, OSError) as e:
        if isinstance(e, _LOST) or conn.is_closed():
            raise _lost(what) from None
        if isinstance(e, asyncssh.ChannelOpenError):
            raise SyncError(f"the VM refused another SSH channel ({what}): {e.reason}") from None
        raise SyncError(f"{what} failed: {getattr(e, 'reason', None) or e}") from None


async def _run(conn, script: str, what: str, stdin: bytes | None = None) -> asyncssh.SSHCompletedProcess:
    async with _remote(conn, what):
        done = await conn.run(script, input=stdin, encoding=None, check=False)
    if done.exit_status is None:
        raise _lost(what)
    if done.exit_status != 0:
        raise _remote_error(what, done.stderr, done.exit_status)
    return done


async def _why_sftp_failed(sftp, folder: str, what: str, e: asyncssh.SFTPFailure) -> SyncError:
    """OpenSSH's SFTP says only "Failure" for a full disk: ask the file system."""
    try:
        vfs = await sftp.statvfs(folder)
        if vfs.bavail * vfs.frsize < CHUNK:
            return _remote_error(what, "no space left")
    except (asyncssh.Error, OSError):
        pass
    return SyncError(f"{what} failed on the VM: {e.reason}")


# ------------------------------------------------------------------ the seeding lock


class _SeedingLock:
    """The idle-killer's seeding lock on the VM, by the VM's clock (see the module's docstring)."""

    TAKE = r"""f={lock}; want=$(( $(date +%s) + {seconds} ))
mkdir -p -- "$(dirname -- "$f")" || exit 71
old=$(cat -- "$f" 2>/dev/null); old=${{old%%[!0-9]*}}
if [ -n "$old" ] && [ "$old" -gt "$want" ]; then echo "keep $old"
else printf '%s\n' "$want" > "$f.gpu-rent-tmp" && mv -f -- "$f.gpu-rent-tmp" "$f" && echo "took $want" || exit 71; fi"""
    RELEASE = r"""f={lock}; old=$(cat -- "$f" 2>/dev/null)
if [ "${{old%%[!0-9]*}}" = "{ours}" ]; then date +%s > "$f.gpu-rent-tmp" && mv -f -- "$f.gpu-rent-tmp" "$f"; fi"""

    def __init__(self, conn, path: str, refresh: float):
        self.conn, self.path, self.refresh = conn, path, refresh
        self.ours: str | None = None  # the value we wrote last
        self.task: asyncio.Task | None = None
        # One write at a time, and none cut off half-way: a refresh cancelled after the VM ran it
        # would leave a value we do not know as ours (and the release would not release it).
        self.writing = asyncio.Lock()

    def _take_script(self) -> str:
        return self.TAKE.format(lock=shlex.quote(self.path), seconds=LOCK_SECONDS)

    def _note(self, stdout: bytes) -> None:
        verb, _, value = _first_line(stdout).partition(" ")
        if verb == "took":
            self.ours = value

    async def take(self, then: str = "", stdin: bytes | None = None) -> None:
        """Take the lock and start refreshing it; `then` runs after it in the same exec."""
        script = f"( {self._take_script()} ) || exit 71\n{then}"
        async with self.writing, _remote(self.conn, "taking the seeding lock"):
            done = await self.conn.run(script, input=stdin, encoding=None, check=False)
            self._note(done.stdout)
        if done.exit_status == 71:
            raise _remote_error(f"writing the seeding lock {self.path}", done.stderr, 71)
        if done.exit_status != 0:
            raise _remote_error("creating the folders", done.stderr, done.exit_status)
        if self.task is None:
            self.task = asyncio.create_task(self._keep())

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.refresh)
            async with self.writing:
                with contextlib.suppress(asyncssh.Error, OSError):  # a lost connection fails the copy itself
                    done = await asyncio.wait_for(self.conn.run(self._take_script(), encoding=None, check=False), 30)
                    self._note(done.stdout)

    async def release(self) -> None:
        if self.task is not None:
            async with self.writing:  # a refresh under way ends first
                self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        if self.ours is None or self.conn.is_closed():
            return  # not ours, or it runs out by itself within LOCK_SECONDS
        script = self.RELEASE.format(lock=shlex.quote(self.path), ours=self.ours)
        with contextlib.suppress(asyncssh.Error, OSError, TimeoutError):
            await asyncio.wait_for(self.conn.run(script, check=False), 10)


# ------------------------------------------------------------------ progress and hashes


class _Meter:
    def __init__(self, total: int, callback: Progress | None):
        self.total, self.done, self.callback = total, 0, callback
        self.finished: list[_Job] = []
        if callback:
            callback(0, total, "")

    def add(self, n: int, name: str) -> None:
        self.done += n
        if self.callback:
            self.callback(self.done, self.total, name)


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _unescape(name: bytes) -> bytes:
    """sha256sum's escaping of names with a backslash, newline or carriage return."""
    return re.sub(rb"\\(.)", lambda m: {b"n": b"\n", b"r": b"\r"}.get(m.group(1), m.group(1)), name)


async def _remote_hashes(conn, root: str, rels: list[str]) -> dict[str, str]:
    """sha256 of files under a remote root, HASH_BATCH names per exec; missing or unreadable ones are absent."""
    hashes: dict[str, str] = {}
    for i in range(0, len(rels), HASH_BATCH):
        names = b"\0".join(rel.encode() for rel in rels[i : i + HASH_BATCH])
        async with _remote(conn, "hashing files on the VM"):
            done = await conn.run(
                f"cd -- {shlex.quote(root)} && xargs -0 -r sha256sum --", input=names, encoding=None, check=False
            )
        for line in done.stdout.split(b"\n"):
            escaped = line.startswith(b"\\")
            line = line[1:] if escaped else line
            if len(line) < 67:
                continue
            name = line[66:]
            hashes[(_unescape(name) if escaped else name).decode("utf-8", "replace")] = line[:64].decode()
    return hashes


async def _same_by_hash(conn, local_root: Path, remote_root: str, rels: list[str]) -> set[str]:
    """The files among rels whose content is the same on both sides."""
    if not rels:
        return set()

    def local() -> dict[str, str]:
        out = {}
        for rel in rels:
            with contextlib.suppress(OSError):
                out[rel] = _sha256(local_root / rel)
        return out

    mine, theirs = await asyncio.gather(asyncio.to_thread(local), _remote_hashes(conn, remote_root, rels))
    return {rel for rel in rels if rel in mine and mine[rel] == theirs.get(rel)}


async def _decide(conn, source: _Tree, dest: _Tree, local_root: Path, remote_root: str, checksum: bool):
    """(jobs, skipped count) for one folder pair."""
    jobs, same_size = _plan(source, dest)
    if not checksum:
        return jobs, sum(same for _, same in same_size)
    rels = [rel for rel, _ in same_size]
    same = await _same_by_hash(conn, local_root, remote_root, rels)
    planned = {j.rel for j in jobs}
    for rel in rels:
        if rel not in same and rel not in planned:
            f = source.files[rel]
            jobs.append(_Job(rel, f.size, f.mtime, _partial_rel(rel, f.size, f.mtime)))
    jobs = [j for j in jobs if j.rel not in same]
    jobs.sort(key=lambda j: j.rel)
    return jobs, len(same)


# ------------------------------------------------------------------ push


async def _push_small(conn, sftp, local: Path, remote: str, job: _Job, meter: _Meter) -> None:
    final, partial = f"{remote}/{job.rel}", f"{remote}/{job.partial}"
    try:
        data = (local / job.rel).read_bytes()
    except OSError as e:
        raise _local_error(f"reading {local / job.rel}", e) from None
    what = f"writing {final}"
    async with _remote(conn, what):
        try:
            for stale in job.stale:
                with contextlib.suppress(asyncssh.SFTPNoSuchFile):
                    await sftp.remove(f"{remote}/{stale}")
            async with sftp.open(partial, "wb") as f:
                if data:
                    await f.write(data, 0)
                with contextlib.suppress(asyncssh.SFTPOpUnsupported):
                    await f.fsync()
                await f.utime((job.mtime, job.mtime))
            await sftp.posix_rename(partial, final)
        except asyncssh.SFTPFailure as e:
            if conn.is_closed():
                raise
            raise await _why_sftp_failed(sftp, partial.rpartition("/")[0] or "/", what, e) from None
    meter.add(len(data), job.rel)
    meter.finished.append(job)


_PUSH = r"""p={partial}; f={final}
{remove}if [ {offset} -gt 0 ]; then
  s=$(stat -c %s -- "$p") && [ "$s" -ge {offset} ] && truncate -s {offset} -- "$p" && cat >> "$p" || exit 1
else cat > "$p" || exit 1; fi
[ "$(stat -c %s -- "$p")" = {size} ] || exit 75
sync -- "$p" && touch -c -m -d @{mtime} -- "$p" && mv -f -- "$p" "$f"
"""


async def _push_big(conn, local: Path, remote: str, job: _Job, meter: _Meter) -> None:
    q = shlex.quote
    final = f"{remote}/{job.rel}"
    script = _PUSH.format(
        partial=q(f"{remote}/{job.partial}"),
        final=q(final),
        remove="".join(f"rm -f -- {q(f'{remote}/{s}')}\n" for s in job.stale),
        offset=job.offset,
        size=job.size,
        mtime=job.mtime,
    )
    what = f"sending {job.rel}"
    try:
        source = open(local / job.rel, "rb")  # noqa: SIM115 - closed in the finally below
    except OSError as e:
        raise _local_error(f"reading {local / job.rel}", e) from None
    try:
        async with _remote(conn, what):
            proc = await conn.create_process(script, encoding=None, window=WINDOW, max_pktsize=PACKET)
            try:
                try:
                    source.seek(job.offset)
                    left = job.size - job.offset
                    while left > 0:
                        data = source.read(min(CHUNK, left))
                        if not data:
                            break  # it shrank: the size check on the VM keeps the partial from the final name
                        proc.stdin.write(data)
                        await proc.stdin.drain()
                        left -= len(data)
                        meter.add(len(data), job.rel)
                    proc.stdin.write_eof()
                except (asyncssh.Error, OSError):
                    if conn.is_closed():
                        raise
                    # the command stopped reading (a full disk, say): its exit status and stderr say why
                    done = await asyncio.wait_for(proc.wait(), 30)
                else:
                    done = await proc.wait()
            finally:
                proc.close()
    finally:
        source.close()
    if done.exit_status is None:
        raise _lost(what)
    if done.exit_status == 75:
        raise SyncError(f"{local / job.rel} changed while it was being sent: run it again")
    if done.exit_status != 0:
        raise _remote_error(f"writing {final}", done.stderr, done.exit_status)
    meter.finished.append(job)


async def _gather_limited(limit: int, coros) -> None:
    """Run the coroutines `limit` at a time; the first failure cancels the rest and is raised."""
    queue = list(coros)
    queue.reverse()

    async def worker():
        while queue:
            await queue.pop()

    workers = [asyncio.create_task(worker()) for _ in range(min(limit, len(queue)))]
    try:
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for c in queue:
            c.close()


async def push(
    conn: asyncssh.SSHClientConnection,
    pairs: list[tuple[Path, str]],
    *,
    checksum: bool = False,
    on_progress: Progress | None = None,
    lock: str | None = SEEDING_LOCK,
    lock_refresh: float = LOCK_REFRESH_SECONDS,
) -> SyncResult:
    """Copy each local folder into its remote folder (absolute); a missing local folder is skipped.

    `lock`: the seeding lock file on the VM (None: leave it alone). Raises SyncError.
    """
    started = time.monotonic()
    result = SyncResult()
    present = []
    for local, remote in pairs:
        if not remote.startswith("/"):
            raise ValueError(f"remote folder {remote!r} is not absolute")
        if local.is_dir():
            present.append((local, remote.rstrip("/") or "/"))
        else:
            result.missing.append(str(local))
    try:
        local_trees = await asyncio.to_thread(lambda: [_local_tree(local) for local, _ in present])
    except OSError as e:
        raise _local_error("listing the local folders", e) from None
    remote_trees = await _remote_trees(conn, [remote for _, remote in present])
    seeding = _SeedingLock(conn, lock, lock_refresh) if lock else None
    try:
        if seeding and checksum and any(t and t.files for t in remote_trees):
            await seeding.take()  # hashing a large tree on the VM takes a while too
        work = []
        for (local, remote), mine, theirs in zip(present, local_trees, remote_trees, strict=True):
            jobs, skipped = await _decide(conn, mine, theirs or _Tree(), local, remote, checksum)
            result.files_skipped += skipped
            work.extend((local, remote, job) for job in jobs)
        if not work:
            return result
        folders = sorted({f"{remote}/{job.rel}".rpartition("/")[0] or "/" for _, remote, job in work})
        mkdir = "xargs -0 -r mkdir -p --"
        names = b"\0".join(f.encode() for f in folders)
        if seeding:
            await seeding.take(mkdir, names)
        else:
            await _run(conn, mkdir, "creating the folders", names)
        meter = _Meter(sum(job.size - job.offset for _, _, job in work), on_progress)
        small = [w for w in work if w[2].size < BIG]
        big = [w for w in work if w[2].size >= BIG]
        if small:
            async with _remote(conn, "starting SFTP"):
                sftp = await conn.start_sftp_client()
            try:
                await _gather_limited(SMALL_PARALLEL, (_push_small(conn, sftp, *w, meter) for w in small))
            finally:
                sftp.exit()
                with contextlib.suppress(asyncssh.Error, OSError):
                    await sftp.wait_closed()
        await _gather_limited(BIG_PARALLEL, (_push_big(conn, *w, meter) for w in big))
        _count(result, meter.finished)
        return result
    finally:
        if seeding:
            await seeding.release()
        result.seconds = time.monotonic() - started


def _count(result: SyncResult, jobs: list[_Job]) -> None:
    result.files_sent += len(jobs)
    result.files_resumed += sum(1 for job in jobs if job.offset)
    result.bytes_sent += sum(job.size - job.offset for job in jobs)


# ------------------------------------------------------------------ pull


def _finish_local(handle, partial: Path, final: Path, mtime: int) -> None:
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()
    os.utime(partial, (mtime, mtime))
    os.replace(partial, final)


async def _pull_small(conn, sftp, remote: str, local: Path, job: _Job, meter: _Meter) -> None:
    source = f"{remote}/{job.rel}"
    async with _remote(conn, f"reading {source}"), sftp.open(source, "rb") as f:
        data = await f.read(job.size)
    if len(data) != job.size:
        return  # it changed under us (an image still being written): the next pull takes it
    partial, final = local / job.partial, local / job.rel
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        for stale in job.stale:
            with contextlib.suppress(FileNotFoundError):
                (local / stale).unlink()
        with open(partial, "wb") as out:
            out.write(data)
            _finish_local(out, partial, final, job.mtime)
    except OSError as e:
        raise _local_error(f"writing {final}", e) from None
    meter.add(len(data), job.rel)
    meter.finished.append(job)


async def _pull_big(conn, remote: str, local: Path, job: _Job, meter: _Meter) -> None:
    source = f"{remote}/{job.rel}"
    partial, final = local / job.partial, local / job.rel
    what = f"receiving {job.rel}"
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        for stale in job.stale:
            with contextlib.suppress(FileNotFoundError):
                (local / stale).unlink()
        out = open(partial, "r+b" if job.offset else "wb")  # noqa: SIM115 - closed below
        out.truncate(job.offset)
        out.seek(job.offset)
    except OSError as e:
        raise _local_error(f"writing {partial}", e) from None
    got = job.offset
    try:
        async with _remote(conn, what):
            proc = await conn.create_process(
                f"tail -c +{job.offset + 1} -- {shlex.quote(source)}",
                encoding=None,
                stdin=asyncssh.DEVNULL,
                window=WINDOW,
                max_pktsize=PACKET,
            )
            try:
                while got < job.size:
                    data = await proc.stdout.read(min(4 * CHUNK, job.size - got))
                    if not data:
                        break
                    try:
                        out.write(data)
                    except OSError as e:
                        raise _local_error(f"writing {partial}", e) from None
                    got += len(data)
                    meter.add(len(data), job.rel)
                if got < job.size:
                    done = await proc.wait()
                    if done.exit_status is None and conn.is_closed():
                        raise _lost(what)
                    if done.exit_status:
                        raise _remote_error(f"reading {source}", done.stderr, done.exit_status)
                    return  # it shrank: the next pull takes it as it is then
            finally:
                proc.close()
        try:
            _finish_local(out, partial, final, job.mtime)
        except OSError as e:
            raise _local_error(f"writing {final}", e) from None
        meter.finished.append(job)
    finally:
        out.close()


async def pull(
    conn: asyncssh.SSHClientConnection,
    remote: str,
    local: Path,
    *,
    checksum: bool = False,
    on_progress: Progress | None = None,
) -> SyncResult:
    """Copy new and changed files of a remote folder (absolute) into a local folder; deletes nothing.

    A remote folder that does not exist is reported in `missing`. Raises SyncError.
    """
    started = time.monotonic()
    result = SyncResult()
    if not remote.startswith("/"):
        raise ValueError(f"remote folder {remote!r} is not absolute")
    remote = remote.rstrip("/") or "/"
    try:
        mine, (theirs,) = await asyncio.gather(
            asyncio.to_thread(_local_tree, local) if local.is_dir() else asyncio.sleep(0, _Tree()),
            _remote_trees(conn, [remote]),
        )
    except OSError as e:
        raise _local_error(f"listing {local}", e) from None
    try:
        if theirs is None:
            result.missing.append(remote)
            return result
        jobs, result.files_skipped = await _decide(conn, theirs, mine, local, remote, checksum)
        if not jobs:
            return result
        try:
            local.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise _local_error(f"creating {local}", e) from None
        meter = _Meter(sum(job.size - job.offset for job in jobs), on_progress)
        small = [job for job in jobs if job.size < BIG]
        big = [job for job in jobs if job.size >= BIG]
        if small:
            async with _remote(conn, "starting SFTP"):
                sftp = await conn.start_sftp_client()
            try:
                await _gather_limited(SMALL_PARALLEL, (_pull_small(conn, sftp, remote, local, j, meter) for j in small))
            finally:
                sftp.exit()
                with contextlib.suppress(asyncssh.Error, OSError):
                    await sftp.wait_closed()
        await _gather_limited(BIG_PARALLEL, (_pull_big(conn, remote, local, j, meter) for j in big))
        _count(result, meter.finished)
        return result
    finally:
        result.seconds = time.monotonic() - started
