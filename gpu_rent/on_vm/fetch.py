"""gpu-rent fetch: one file downloaded, resumed, checked and put in place (installed by the seed role).

Run on the VM as `python3 -m on_vm.fetch`, from the on_vm package the seed and llm_runtime roles install.

Subcommands:
  fetch   download URL into DIR/NAME through NAME.part, resuming with HTTP Range, and rename it
          into place only when its sha256 matches; prints "present PATH" or "downloaded PATH"
  check   "present PATH" when the file is in place and trusted, "missing NAME" otherwise
  lock    write the seeding lock: a unix timestamp until which the idle-killer stays silent
  status  the latest progress line of a running download, then "job: running" or "job: finished"

Standard library only: the VM has python3 and nothing else is installed for this. A failure ends
with exit code 1 and one line on stderr that names what went wrong; the token never appears in it.

One file past 500 lines on purpose: its four commands share the .part, sidecar and lock handling of one
download, and the roles follow a download by calling it again (status) with the same names.
"""

from __future__ import annotations

import argparse
import contextlib
import email.message
import fcntl
import hashlib
import http.client
import json
import os
import re
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from . import paths
from .progress_line import MAX_STAGE as STAGE_MAX
from .progress_line import format_line as progress_line
from .progress_line import parse as parse_progress

SIDECAR_SUFFIX = ".gpu-rent-sha256"
CHUNK = 1 << 20
PROGRESS_INTERVAL = 0.5  # at most two lines a second: enough for a bar, little for a log
LOCK_REFRESH_INTERVAL = 60
DISK_MARGIN = 1.05  # the spec's 5 % margin on free disk
USER_AGENT = "gpu-rent-seed/1"


class FetchError(Exception):
    """A failure to report as one line; the process exits 1."""


class Interrupted(Exception):
    """The transfer stopped part-way; what arrived stays in the .part file for a resume."""


# ------------------------------------------------------------------ pure parts


def stage_text(kind: str, name: str) -> str:
    stage = f"{kind}: {name}"
    return stage if len(stage) <= STAGE_MAX else stage[: STAGE_MAX - 1] + "…"


def safe_name(name: str | None) -> str | None:
    """A plain file name, or None: never a path that could leave the target folder."""
    if not name:
        return None
    name = name.strip().replace("\\", "/").rsplit("/", 1)[-1]
    if name in ("", ".", "..") or "\0" in name or name.endswith((".part", SIDECAR_SUFFIX)):
        return None
    return name


def name_from_url(url: str) -> str | None:
    return safe_name(urllib.parse.unquote(urllib.parse.urlsplit(url).path))


def name_from_disposition(value: str | None) -> str | None:
    if not value:
        return None
    msg = email.message.Message()
    msg["content-disposition"] = value
    return safe_name(msg.get_filename())


def shown_url(url: str) -> str:
    """The URL without credentials or query: presigned links and tokens stay out of messages."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def parse_content_range(value: str | None) -> tuple[int, int | None] | None:
    """(first byte, full size or None) of a Content-Range header, or None."""
    match = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", value or "")
    if not match:
        return None
    return int(match[1]), None if match[3] == "*" else int(match[3])


def sidecar_of(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def trusted_sha256(path: Path) -> str | None:
    """The sha256 recorded beside the file, if the file still has the size and mtime it had then.

    Hashing a model of many GB on every run would take minutes; size and mtime change with any rewrite.
    """
    try:
        st = path.stat()
        record = json.loads(sidecar_of(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    if record.get("size") != st.st_size or record.get("mtime_ns") != st.st_mtime_ns:
        return None
    sha = record.get("sha256")
    return sha if isinstance(sha, str) else None


def write_sidecar(path: Path, sha256: str) -> None:
    st = path.stat()
    record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}
    atomic_write(sidecar_of(path), json.dumps(record) + "\n")


def find_present(folder: Path, name: str | None, sha256: str | None) -> Path | None:
    """The file already in place: by name, or (no name known yet) any file the sidecars vouch for."""
    if name:
        dest = folder / name
        if not dest.is_file():
            return None
        if sha256 is None or trusted_sha256(dest) == sha256:
            return dest
        return None
    if sha256 is None or not folder.is_dir():
        return None
    for sidecar in sorted(folder.glob("*" + SIDECAR_SUFFIX)):
        candidate = sidecar.with_name(sidecar.name[: -len(SIDECAR_SUFFIX)])
        if candidate.is_file() and trusted_sha256(candidate) == sha256:
            return candidate
    return None


def job_finished(job_file: Path) -> bool:
    """Whether an Ansible async job is over, read from its results file as async_status does."""
    try:
        text = job_file.read_text()
    except FileNotFoundError:
        return True  # cleaned up or never there: nothing left to wait for
    if not text.strip():
        return False
    try:
        data = json.loads(text)
    except ValueError:
        return True
    return not isinstance(data, dict) or "started" not in data or bool(data.get("finished"))


# ------------------------------------------------------------------ files


def atomic_write(path: Path, text: str, mode: int = 0o644) -> None:
    """Readers (the wrapper's poll, the idle-killer) never see a half-written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_lock(lock_file: Path, minutes: int) -> None:
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(lock_file, f"{int(time.time()) + minutes * 60}\n")


class Progress:
    """Progress lines to stdout and to the progress file, throttled; keeps the seeding lock fresh."""

    def __init__(self, stage: str, progress_file: Path | None, lock_file: Path | None, lock_minutes: int):
        self.stage = stage
        self.progress_file = progress_file
        self.lock_file = lock_file
        self.lock_minutes = lock_minutes
        self.last = float("-inf")
        self.last_lock = time.monotonic()

    def update(self, done: int, total: int | None, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < PROGRESS_INTERVAL:
            return
        self.last = now
        line = progress_line(done, total, self.stage)
        print(line, flush=True)
        if self.progress_file is not None:
            with contextlib.suppress(OSError):
                atomic_write(self.progress_file, line + "\n")
        if self.lock_file is not None and now - self.last_lock >= LOCK_REFRESH_INTERVAL:
            self.last_lock = now
            # Only an existing lock is refreshed: once the play has released it, a download left
            # running must not silence the idle-killer again.
            if self.lock_file.exists():
                with contextlib.suppress(OSError):
                    write_lock(self.lock_file, self.lock_minutes)


def hash_file(path: Path, progress: Progress | None, total: int | None = None) -> hashlib._Hash:
    digest = hashlib.sha256()
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress.update(done, total)
    return digest


@contextlib.contextmanager
def exclusive(lock_path: Path):
    """One download per file: a run left behind by a cancelled play is waited for, not raced."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


# ------------------------------------------------------------------ download


class Fetch:
    def __init__(self, args: argparse.Namespace):
        self.url: str = args.url
        self.folder = Path(args.dir)
        self.sha256: str | None = args.sha256.lower() if args.sha256 else None
        self.civitai: str | None = args.civitai
        self.name = safe_name(args.name) or (None if self.civitai else name_from_url(self.url))
        if self.name is None and not self.civitai:
            raise FetchError(f"cannot tell a file name from {shown_url(self.url)}: give the entry a name")
        self.kind: str = args.kind
        self.retries: int = args.retries
        self.token = read_token(args.token_file)
        self.progress = Progress(
            stage_text(self.kind, self.label),
            Path(args.progress_file) if args.progress_file else None,
            Path(args.lock_file) if args.lock_file else None,
            args.lock_minutes,
        )
        # Before the server names a Civitai file, the part is named after the version id, so an
        # interrupted run resumes it all the same.
        self.part = self.folder / (f"{self.name}.part" if self.name else f"civitai-{self.civitai}.part")

    @property
    def label(self) -> str:
        return self.name or f"civitai model version {self.civitai}"

    def run(self) -> str:
        present = find_present(self.folder, self.name, self.sha256)
        if present is not None:
            return f"present {present}"
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.name and self.sha256 and (self.folder / self.name).is_file():
            dest = self.folder / self.name
            got = hash_file(dest, self.progress, dest.stat().st_size).hexdigest()
            if got == self.sha256:
                write_sidecar(dest, got)  # put there by hand, or the sidecar was lost
                return f"present {dest}"
            raise FetchError(self.taken(dest, got))
        for attempt in range(self.retries + 1):
            try:
                digest = self.download_once()
                break
            except Interrupted as e:
                if attempt == self.retries:
                    size = self.part.stat().st_size if self.part.exists() else 0
                    raise FetchError(
                        f"download of {self.label} interrupted after {size} bytes ({e}); "
                        "run again to resume where it stopped"
                    ) from None
                time.sleep(min(2**attempt, 30))
        return self.finish(digest)

    def request(self, offset: int) -> http.client.HTTPResponse | None:
        """The response, or None when the server says the part already holds the whole file (416)."""
        req = urllib.request.Request(self.url, headers={"User-Agent": USER_AGENT})
        if offset:
            req.add_header("Range", f"bytes={offset}-")  # follows redirects: the CDN serves the range
        if self.token:
            # Unredirected: Civitai answers with a presigned CDN link, and the token must not go there.
            req.add_unredirected_header("Authorization", f"Bearer {self.token}")
        try:
            return urllib.request.urlopen(req, timeout=60)
        except urllib.error.HTTPError as e:
            if e.code == 416 and offset:
                return None
            raise FetchError(self.refusal(e.code, e.reason)) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise Interrupted(f"{shown_url(self.url)}: {reason}") from None

    def refusal(self, code: int, reason: str) -> str:
        text = f"download of {self.label} failed: HTTP {code} {reason} from {shown_url(self.url)}"
        if self.civitai and code in (401, 403):
            text += " (Civitai wants an API token for it: set CIVITAI_TOKEN in .env)"
        return text

    def download_once(self) -> hashlib._Hash:
        part = self.part
        offset = part.stat().st_size if part.exists() else 0
        resp = self.request(offset)
        if resp is None:  # 416: the part may be complete already; its checksum decides
            digest = hash_file(part, self.progress, offset)
            if self.sha256 and digest.hexdigest() != self.sha256:
                part.unlink()
                raise Interrupted("the server refused to resume; starting over")
            return digest
        with resp:
            if not self.name:
                self.name = name_from_disposition(resp.headers.get("Content-Disposition")) or name_from_url(resp.url)
                if self.name is None:
                    self.name = f"civitai-{self.civitai}"
                self.progress.stage = stage_text(self.kind, self.name)
            length = resp.headers.get("Content-Length")
            content_range = parse_content_range(resp.headers.get("Content-Range"))
            if offset and resp.status == 206 and content_range and content_range[0] == offset:
                total = content_range[1] or (offset + int(length) if length else None)
                digest = hash_file(part, self.progress, total)
                mode = "ab"
            elif resp.status == 206:  # a range other than the one asked for: nothing to build on
                part.unlink(missing_ok=True)
                raise Interrupted("the server answered with another range; starting over")
            else:  # the server ignored the range (or there was none): start over
                offset = 0
                total = int(length) if length else None
                digest = hashlib.sha256()
                mode = "wb"
            if total is not None:
                self.check_space(total - offset)
            done = offset
            self.progress.update(done, total, force=True)
            with open(part, mode) as f:
                try:
                    # read1: whatever has arrived, so progress moves with the bytes rather than per MiB.
                    while chunk := resp.read1(CHUNK):
                        f.write(chunk)
                        digest.update(chunk)
                        done += len(chunk)
                        self.progress.update(done, total)
                except (http.client.HTTPException, OSError) as e:
                    raise Interrupted(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__) from None
                finally:
                    f.flush()
                    os.fsync(f.fileno())
            self.progress.update(done, total, force=True)
            if total is not None and done < total:
                raise Interrupted(f"connection closed at {done} of {total} bytes")
        return digest

    def check_space(self, needed: int) -> None:
        free = shutil.disk_usage(self.folder).free
        if free < needed * DISK_MARGIN:
            gib = 1024**3
            raise FetchError(
                f"disk: {free / gib:.1f} GB free in {self.folder}, need {needed * DISK_MARGIN / gib:.1f} GB "
                f"for {self.label} (with a 5 % margin)"
            )

    def taken(self, dest: Path, have: str) -> str:
        """A file of that name that is not the one wanted is the user's (e.g. downloaded in the UI): kept."""
        return (
            f"{dest} exists with sha256 {have}, but seed.yml wants {self.sha256}: it is left as it is; "
            "rename or remove it, or give the seed.yml entry another name"
        )

    def finish(self, digest: hashlib._Hash) -> str:
        got = digest.hexdigest()
        part = self.part
        if self.sha256 and got != self.sha256:
            part.unlink(missing_ok=True)
            raise FetchError(f"sha256 mismatch for {self.label}: expected {self.sha256}, got {got}; removed")
        assert self.name is not None
        dest = self.folder / self.name
        if dest.is_file():  # a name learnt only now (Civitai): the same rule, someone else's file stays
            have = hash_file(dest, None, dest.stat().st_size).hexdigest()
            if have != got:
                raise FetchError(self.taken(dest, have) + f"; the download is kept as {part}")
        sidecar_of(dest).unlink(missing_ok=True)
        os.replace(part, dest)
        write_sidecar(dest, got)
        return f"downloaded {dest}"


def read_token(token_file: str | None) -> str | None:
    if not token_file:
        return None
    try:
        return Path(token_file).read_text().strip() or None
    except OSError as e:
        raise FetchError(f"cannot read the token file {token_file}: {e.strerror}") from None


def flock_path(args: argparse.Namespace) -> Path:
    run_dir = Path(args.progress_file).parent if args.progress_file else Path(paths.RUN_DIR)
    key = hashlib.sha256(f"{args.dir}\0{args.name or ''}\0{args.civitai or args.url}".encode()).hexdigest()[:16]
    return run_dir / f"fetch-{key}.lock"


# ------------------------------------------------------------------ commands


def cmd_fetch(args: argparse.Namespace) -> int:
    with exclusive(flock_path(args)):
        print(Fetch(args).run(), flush=True)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    name = safe_name(args.name) or (None if args.civitai else name_from_url(args.url or ""))
    present = find_present(Path(args.dir), name, args.sha256.lower() if args.sha256 else None)
    print(f"present {present}" if present else f"missing {name or 'civitai model version ' + str(args.civitai)}")
    return 0


def cmd_lock(args: argparse.Namespace) -> int:
    write_lock(Path(args.file), args.minutes)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    progress, job = Path(args.progress_file), Path(args.job_file)
    line = None
    try:
        # A line older than the job is the previous download's.
        if progress.stat().st_mtime >= job.stat().st_mtime:
            line = progress.read_text().strip()
    except OSError:
        pass
    print(line if line and parse_progress(line) else progress_line(0, None, args.stage))
    print("job: finished" if job_finished(job) else "job: running")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fetch.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    def source(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--url", help="where the file is downloaded from")
        sp.add_argument("--dir", required=True, help="folder the file lands in")
        sp.add_argument("--name", help="file name (default: from the URL, or Civitai's answer)")
        sp.add_argument("--sha256", type=sha256_arg, help="expected checksum; without it a present file is kept")
        sp.add_argument("--civitai", type=civitai_arg, help="Civitai model version id the URL downloads")

    f = sub.add_parser("fetch", help="download, resume, verify and put one file in place")
    source(f)
    f.add_argument("--kind", default="download", help="stage prefix in progress lines, e.g. models")
    f.add_argument("--token-file", help="file holding a bearer token (sent only to --url, never on redirects)")
    f.add_argument("--progress-file", help="latest progress line, rewritten as it changes")
    f.add_argument("--lock-file", help="seeding lock kept fresh while downloading, if it exists")
    f.add_argument("--lock-minutes", type=int, default=10)
    f.add_argument("--retries", type=int, default=3, help="resumes within this run after a dropped connection")
    f.set_defaults(func=cmd_fetch)

    c = sub.add_parser("check", help="present PATH when the file is in place and trusted, else missing NAME")
    source(c)
    c.set_defaults(func=cmd_check)

    lk = sub.add_parser("lock", help="write the seeding lock, valid for MINUTES from now")
    lk.add_argument("--file", required=True)
    lk.add_argument("--minutes", type=int, required=True)
    lk.set_defaults(func=cmd_lock)

    st = sub.add_parser("status", help="latest progress line of an async download, then job: running|finished")
    st.add_argument("--progress-file", required=True)
    st.add_argument("--job-file", required=True, help="the Ansible async job's results file")
    st.add_argument("--stage", required=True, help="stage shown before the download writes its first line")
    st.set_defaults(func=cmd_status)
    return p


def sha256_arg(value: str) -> str:
    if not re.fullmatch(r"[0-9a-fA-F]{64}", value):
        raise argparse.ArgumentTypeError(f"not a sha256 (64 hex digits): {value!r}")
    return value.lower()


def civitai_arg(value: str) -> str:
    if not re.fullmatch(r"[0-9]+", value):
        raise argparse.ArgumentTypeError(f"not a Civitai model version id (digits): {value!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "command", None) == "fetch" and not args.url:
        print("fetch.py fetch: --url is required", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except FetchError as e:
        print(e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
