"""gpu-rent llm_pull: Ollama's models pulled through its own HTTP API (installed by the llm_runtime role).

Subcommands:
  check  "present NAME" when Ollama lists the model (with the pinned manifest digest, when one is given),
         "missing NAME" when it does not, "differs NAME sha256:<hex>" when it lists another manifest
  pull   POST /api/pull, streamed, printing ::gpu-rent-progress lines of the model's bytes (SPEC §11);
         then "present NAME" (it was there: nothing pulled) or "pulled NAME sha256:<manifest digest>"

Ollama itself keeps what a pull fetched (server/download.go: the blob's -partial file and a -partial-N record
per part), so a pull that breaks off - here, in a cancelled play or with the VM - resumes where it stopped the
next time the model is pulled. Standard library only: run on the VM as `python3 -m on_vm.llm_pull` from the
on_vm package the role installs, beside fetch, whose progress lines, progress file and seeding-lock refresh
it shares, and progress_line. A failure ends with exit code 1 and one line on stderr that names the model.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from . import ollama_name
from .fetch import Progress, stage_text

STAGE_KIND = "llm"
# Between two lines of a pull's stream. Ollama writes one every 60 ms while bytes come in, but says nothing
# while it hashes a finished blob ("verifying sha256 digest"): tens of GB take minutes on a slow disk.
READ_TIMEOUT = 900
API_TIMEOUT = 30
RESTART_WAIT = 90  # for Ollama to answer again after its stream broke off (systemd restarts it after 3 s)

DIGEST = re.compile(r"(?:sha256:)?([0-9a-fA-F]{64})")


class PullError(Exception):
    """A failure to report as one line; the process exits 1."""


class Interrupted(Exception):
    """The stream broke off; Ollama keeps what came, and a pull of the same model resumes it."""


# ------------------------------------------------------------------ pure parts


def model_key(name: str) -> tuple[str, str, str, str]:
    """host, namespace, model and tag of an Ollama model name, defaults filled in and case folded (ollama_name.py)."""
    return ollama_name.key(name)


def digest_of(value: str | None) -> str | None:
    """sha256:<hex, lower case> of a digest given with or without its sha256: (/api/tags gives it bare)."""
    if not value:
        return None
    match = DIGEST.fullmatch(value.strip())
    return f"sha256:{match[1].lower()}" if match else None


def listed(tags: list[dict], name: str) -> dict | None:
    """The entry /api/tags gives for the model name, or None when Ollama does not list it."""
    wanted = model_key(name)
    for entry in tags:
        shown = entry.get("name") or entry.get("model") or ""
        if isinstance(shown, str) and model_key(shown) == wanted:
            return entry
    return None


def listed_digest(tags: list[dict], name: str) -> str | None:
    """The manifest digest of the model name in /api/tags (routes.go ListHandler: the manifest file's sha256)."""
    entry = listed(tags, name)
    return None if entry is None else digest_of(entry.get("digest")) or "sha256:unknown"


class Layers:
    """A pull's bytes: the sum over the blobs Ollama has reported so far, each by its digest.

    server/images.go PullModel fetches the layers one after another (the model's big blob first), then the config;
    a blob already on disk is reported whole at once. server/download.go reports a blob every 60 ms while it comes
    in and stops when it is done, so a small blob may never be reported and a big one's last report falls short:
    the whole model's size comes from /api/tags after the pull.
    """

    def __init__(self) -> None:
        self.blobs: dict[str, tuple[int, int]] = {}

    def update(self, event: dict) -> bool:
        """Takes one line of the stream; True when it was a blob's progress."""
        digest = event.get("digest")
        if not isinstance(digest, str) or not digest:
            return False
        completed, total = event.get("completed") or 0, event.get("total") or 0  # omitempty: absent while 0
        if not isinstance(completed, int) or not isinstance(total, int):
            return False
        self.blobs[digest] = (completed, total)
        return True

    @property
    def done(self) -> int:
        return sum(completed for completed, _ in self.blobs.values())

    @property
    def total(self) -> int | None:
        return sum(total for _, total in self.blobs.values()) or None


# ------------------------------------------------------------------ Ollama's API


class Ollama:
    def __init__(self, url: str):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise PullError(f"not an http URL of Ollama's API: {url}")
        self.url = url.rstrip("/")
        self.host, self.port = parts.hostname, parts.port or 80

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        conn = self._connect(API_TIMEOUT)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, data, {"Content-Type": "application/json"} if data else {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise PullError(f"Ollama at {self.url} does not answer {method} {path}: {e}") from None
        finally:
            conn.close()

    def tags(self) -> list[dict]:
        code, data = self.call("GET", "/api/tags")
        try:
            models = json.loads(data)["models"] if code == 200 else None
        except (ValueError, KeyError, TypeError):
            models = None
        if not isinstance(models, list):
            raise PullError(f"Ollama at {self.url} answers GET /api/tags with {code}: {data[:200]!r}")
        return models

    def answers(self) -> bool:
        conn = self._connect(5)
        try:
            conn.request("GET", "/api/version")
            return conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def pull_stream(self, name: str, insecure: bool) -> Iterator[dict]:
        """The lines of a streamed POST /api/pull (routes.go PullHandler), as objects."""
        body = json.dumps({"model": name, "insecure": insecure, "stream": True}).encode()
        conn = self._connect(READ_TIMEOUT)
        try:
            try:
                conn.request("POST", "/api/pull", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                raise Interrupted(f"Ollama at {self.url}: {e}") from None
            if resp.status != 200:  # refused before the stream starts: a bad name, a bad request
                raise PullError(f"pull of {name} refused: {error_text(resp.read()) or f'HTTP {resp.status}'}")
            while True:
                try:
                    line = resp.readline()
                except (OSError, http.client.HTTPException) as e:
                    raise Interrupted(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__) from None
                if not line:
                    return
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    raise Interrupted(f"a broken line in Ollama's stream: {line[:200]!r}") from None
                if isinstance(event, dict):
                    yield event
        finally:
            conn.close()


def error_text(data: bytes) -> str:
    try:
        said = json.loads(data).get("error")
    except (ValueError, AttributeError):
        said = None
    return str(said) if said else data.decode("utf-8", "replace").strip()[:300]


# ------------------------------------------------------------------ the pull


def pull_once(api: Ollama, name: str, insecure: bool, progress: Progress) -> None:
    layers = Layers()
    said = None
    for event in api.pull_stream(name, insecure):
        if "error" in event:  # e.g. images.go verifyBlob's "digest mismatch, file must be downloaded again: ..."
            raise PullError(f"pull of {name} failed: {event['error']}")
        if layers.update(event):
            progress.update(layers.done, layers.total)
            continue
        status = event.get("status")
        if isinstance(status, str) and status != said:
            print(status, flush=True)  # pulling manifest, verifying sha256 digest, writing manifest, success
            said = status
    if said != "success":
        raise Interrupted(f"the stream ended after {said or 'nothing'!r}, before success")


def pull(api: Ollama, name: str, digest: str | None, insecure: bool, progress: Progress, retries: int) -> str:
    have = listed_digest(api.tags(), name)
    if have is not None and (digest is None or have == digest):
        return f"present {name}"
    progress.update(0, None, force=True)  # the stage shows before the manifest comes
    for attempt in range(retries + 1):
        try:
            pull_once(api, name, insecure, progress)
            break
        except Interrupted as e:
            if attempt == retries:
                raise PullError(
                    f"pull of {name} interrupted ({e}); Ollama keeps what came: run again to resume"
                ) from None
            time.sleep(min(2**attempt, 30))
            deadline = time.monotonic() + RESTART_WAIT
            while not api.answers() and time.monotonic() < deadline:
                time.sleep(1)
    tags = api.tags()
    have, entry = listed_digest(tags, name), listed(tags, name) or {}
    if have is None:
        raise PullError(f"pull of {name} said success, but Ollama does not list it")
    size = entry.get("size")
    if isinstance(size, int) and size > 0:
        progress.update(size, size, force=True)  # the whole model, blobs never reported included
    if digest is not None and have != digest:
        # Not deleted: the name may hold a model the user ran yesterday, and a typo in the pin must not cost it.
        raise PullError(
            f"model {name}: its manifest is {have}, not the pinned {digest} (the registry moved the tag, or the "
            "pin is wrong); Ollama keeps what it pulled: correct the digest or the name"
        )
    return f"pulled {name} {have}"


# ------------------------------------------------------------------ commands


def cmd_check(args: argparse.Namespace) -> int:
    have = listed_digest(Ollama(args.url).tags(), args.model)
    if have is None:
        print(f"missing {args.model}")
    elif args.digest is not None and have != args.digest:
        print(f"differs {args.model} {have}")
    else:
        print(f"present {args.model}")
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    progress = Progress(
        stage_text(STAGE_KIND, args.model),
        Path(args.progress_file) if args.progress_file else None,
        Path(args.lock_file) if args.lock_file else None,
        args.lock_minutes,
    )
    print(pull(Ollama(args.url), args.model, args.digest, args.insecure, progress, args.retries), flush=True)
    return 0


def digest_arg(value: str) -> str:
    digest = digest_of(value)
    if digest is None:
        raise argparse.ArgumentTypeError(f"not a manifest digest (sha256:<64 hex digits>): {value!r}")
    return digest


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llm_pull.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    def model(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--url", default="http://127.0.0.1:11434", help="Ollama's API on this VM")
        sp.add_argument("--model", required=True, help="the model's name, as Ollama pulls it")
        sp.add_argument("--digest", type=digest_arg, help="the manifest it must have (sha256:<hex>, as /api/tags)")

    c = sub.add_parser("check", help="present, missing or differs, from /api/tags")
    model(c)
    c.set_defaults(func=cmd_check)

    pl = sub.add_parser("pull", help="pull one model through /api/pull, with progress lines")
    model(pl)
    pl.add_argument("--insecure", action="store_true", help='ask the registry over plain HTTP ("insecure")')
    pl.add_argument("--progress-file", help="latest progress line, rewritten as it changes")
    pl.add_argument("--lock-file", help="seeding lock kept fresh while pulling, if it exists")
    pl.add_argument("--lock-minutes", type=int, default=10)
    pl.add_argument("--retries", type=int, default=3, help="pulls resumed within this run after the stream broke")
    pl.set_defaults(func=cmd_pull)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except PullError as e:
        print(e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
