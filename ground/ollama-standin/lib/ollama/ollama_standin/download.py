"""Pulling a model from a registry, as upstream does it.

- server/images.go PullModel: "pulling manifest"; GET {scheme}://{host}/v2/{namespace}/{model}/manifests/{tag}
  (Accept: the Docker v2 manifest); each layer, then the config, downloaded (a blob already on disk is a cache hit,
  reported at once as complete); "verifying sha256 digest" of the blobs that were not cache hits (a mismatch removes
  the blob and fails with "digest mismatch, file must be downloaded again: want ..., got ..."); "writing manifest"
  (the registry's bytes as they came); "removing unused layers" of the previous manifest unless OLLAMA_NOPRUNE;
  "success". A manifest of tensor layers needs MLX, which the stand-in (like a build without it) lacks.
  makeRequest: "insecure" turns https into http; makeRequestWithRetry: 404 is "file does not exist", another 4xx/5xx
  is "<code>: <body>".
- server/download.go: a blob is fetched into blobs/sha256-<hex>-partial, in parts of total/16 bytes but at least
  100 MB and at most 1000 MB, each described by blobs/sha256-<hex>-partial-<N> ({"N","Offset","Size","Completed"});
  the size comes from a HEAD; the bytes from the URL the registry's blob GET names in its Location header (a
  redirect to another host is not followed, one to the same host is; no Location fails the pull); every part is a
  Range GET, all parts at once; a part records its progress only when its GET ends (done, cancelled, cut short),
  so a killed server loses the progress of the parts under way and keeps the finished ones; a part that fails is
  retried 6 times, 2^try seconds apart; one stalled for 30 s is retried without counting. Progress is reported
  every 60 ms while the download runs; when the last puller goes away the download is cancelled. Pullers of the
  same digest share one download. When all parts are in, the part files go and -partial becomes the blob.
- api/types.go ProgressResponse: "digest", "total", "completed" are left out when empty or zero.
Registry authentication (the 401 challenge, ~/.ollama/id_ed25519) is not imitated.
"""

import contextlib
import glob
import hashlib
import http.client
import json
import os
import platform
import random
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable

from . import VERSION, envconfig, manifest
from .gotypes import human_bytes
from .logs import log
from .names import Name, parse_name

MAX_RETRIES = 6
NUM_DOWNLOAD_PARTS = 16
MIN_DOWNLOAD_PART_SIZE = 100 * 1000 * 1000  # format.MegaByte is 1000*1000
MAX_DOWNLOAD_PART_SIZE = 1000 * 1000 * 1000
STALL_SECONDS = 30  # downloadStallTimeout
PROGRESS_SECONDS = 0.06  # Wait's ticker
DIRECT_URL_SECONDS = 30  # the context run gives the direct-URL lookup
MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
TENSOR_MEDIA_TYPE = "application/vnd.ollama.image.tensor"
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
USER_AGENT = f"ollama/{VERSION} ({_ARCH} linux) Go/go1.26.0"  # go.mod's go directive at the tag
REDIRECT_CODES = (301, 302, 303, 307, 308)


class PullError(Exception):
    """An error PullModel returns; its text is what the pull's {"error": ...} says."""


class NotFound(PullError):
    def __init__(self):
        super().__init__("file does not exist")  # os.ErrNotExist


class Canceled(PullError):
    def __init__(self):
        super().__init__("context canceled")


class UnexpectedEOF(PullError):
    def __init__(self):
        super().__init__("unexpected EOF")


class PartStalled(PullError):
    def __init__(self):
        super().__init__("part stalled")


def _op(method: str) -> str:
    return method[:1] + method[1:].lower()  # net/http urlErrorOp


def _answers_plain_http(host: str, port: int) -> bool:
    """Go's transport names an HTTP answer to its TLS hello; Python's ssl only says the record was bad."""
    try:
        with socket.create_connection((host, port), timeout=5) as sock:
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname=host)
            with contextlib.suppress(ssl.SSLWantReadError):  # the hello is written; the answer is not read
                tls.do_handshake()
            sock.sendall(outgoing.read())
            return sock.recv(5).startswith(b"HTTP/")
    except OSError:
        return False


class Response:
    def __init__(self, url: str, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self.url, self.conn, self.resp = url, conn, resp
        self.status, self.headers = resp.status, resp.headers

    def read(self) -> bytes:
        try:
            return self.resp.read()
        finally:
            self.close()

    def close(self) -> None:
        self.conn.close()


def http_request(method: str, url: str, headers: dict, follow: Callable[[str, str, int], bool] | None = None,
                 timeout: float = STALL_SECONDS) -> Response:  # fmt: skip
    """One http.Client.Do: redirects followed while follow(old, new, via) says so (at most 10), the last
    response returned unread. PullError carries net/http's url.Error text."""
    via = 0
    while True:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(parts.hostname, port, timeout=timeout,
                                               context=ssl.create_default_context())  # fmt: skip
        else:
            conn = http.client.HTTPConnection(parts.hostname, port, timeout=timeout)
        target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        try:
            conn.request(method, target, headers=headers)
            resp = conn.getresponse()
        except ConnectionRefusedError:
            conn.close()
            raise PullError(f'{_op(method)} "{url}": dial tcp {parts.netloc}: connect: connection refused') from None
        except OSError as e:  # ssl.SSLError among them: a plain-HTTP answer to the hello reads as a bad record
            conn.close()
            if parts.scheme == "https" and _answers_plain_http(parts.hostname, port):
                raise PullError(f'{_op(method)} "{url}": http: server gave HTTP response to HTTPS client') from None
            raise PullError(f'{_op(method)} "{url}": {e}') from None
        location = resp.getheader("Location")
        if resp.status not in REDIRECT_CODES or not location:
            return Response(url, conn, resp)
        new = urllib.parse.urljoin(url, location)
        via += 1
        if via > 10 and follow is None:
            conn.close()
            raise PullError(f'{_op(method)} "{new}": stopped after 10 redirects')
        if follow is not None and not follow(url, new, via):
            return Response(url, conn, resp)
        conn.close()
        url = new


def make_request(method: str, url: str, headers: dict | None, insecure: bool, follow=None) -> Response:
    """makeRequest: insecure turns the scheme to http; upstream's User-Agent."""
    if insecure and not url.startswith("http://"):
        url = "http://" + url.split("://", 1)[1]
    return http_request(method, url, {**(headers or {}), "User-Agent": USER_AGENT}, follow)


def make_request_with_retry(method: str, url: str, headers: dict | None, insecure: bool, follow=None) -> Response:
    resp = make_request(method, url, headers, insecure, follow)
    if resp.status == 401:
        resp.close()
        raise PullError("unauthorized: access denied")  # errUnauthorized; the token exchange is not imitated
    if resp.status == 404:
        resp.close()
        raise NotFound()
    if resp.status >= 400:
        raise PullError(f"{resp.status}: {resp.read().decode(errors='replace')}")
    return resp


def _progress(status: str, digest: str = "", total: int = 0, completed: int = 0) -> dict:
    progress = {"status": status, "digest": digest, "total": total, "completed": completed}
    return {key: value for key, value in progress.items() if value or key == "status"}


class Part:
    def __init__(self, n: int, offset: int, size: int, completed: int = 0):
        self.n, self.offset, self.size, self.completed = n, offset, size, completed

    def to_json(self) -> bytes:  # json.Encoder.Encode of jsonBlobDownloadPart
        return json.dumps({"N": self.n, "Offset": self.offset, "Size": self.size, "Completed": self.completed},
                          separators=(",", ":")).encode() + b"\n"  # fmt: skip


_downloads: dict[str, "BlobDownload"] = {}  # blobDownloadManager
_downloads_lock = threading.Lock()


class BlobDownload:
    def __init__(self, path: str, digest: str):
        self.path, self.digest = path, digest
        self.total = self._completed = 0
        self.parts: list[Part] = []
        self.lock = threading.Lock()
        self.prepared = threading.Event()
        self.done = threading.Event()
        self.cancelled = threading.Event()
        self.err: BaseException | None = None
        self.references = 0

    @property
    def completed(self) -> int:
        with self.lock:
            return self._completed

    def _add(self, n: int) -> None:
        with self.lock:
            self._completed += n

    def _part_path(self, part: Part) -> str:
        return f"{self.path}-partial-{part.n}"

    def _write_part(self, part: Part) -> None:
        with open(self._part_path(part), "wb") as f:
            f.write(part.to_json())

    def prepare(self, url: str, insecure: bool) -> None:
        for path in sorted(glob.glob(glob.escape(self.path) + "-partial-*")):
            with open(path, "rb") as f:
                data = json.load(f)
            part = Part(data.get("N", 0), data.get("Offset", 0), data.get("Size", 0), data.get("Completed", 0))
            self.total += part.size
            self._completed += part.completed
            self.parts.append(part)
        if not self.parts:
            resp = make_request_with_retry("HEAD", url, None, insecure)
            resp.close()
            try:
                self.total = int(resp.headers.get("Content-Length", ""))
            except ValueError:
                self.total = 0
            size = min(max(self.total // NUM_DOWNLOAD_PARTS, MIN_DOWNLOAD_PART_SIZE), MAX_DOWNLOAD_PART_SIZE)
            offset = 0
            while offset < self.total:
                size = min(size, self.total - offset)
                part = Part(len(self.parts), offset, size)
                self._write_part(part)
                self.parts.append(part)
                offset += size
        if self.parts:
            part_size = human_bytes(self.parts[0].size)
            log("INFO", f"downloading {self.digest[7:19]} in {len(self.parts)} {part_size} part(s)")
        self.prepared.set()

    def run(self, url: str, insecure: bool) -> None:
        try:
            self._run(url, insecure)
        except BaseException as e:  # what Wait hands every puller
            self.err = e if isinstance(e, PullError) else PullError(str(e))
        finally:
            with _downloads_lock:
                if _downloads.get(self.digest) is self:
                    del _downloads[self.digest]
            self.done.set()

    def _run(self, url: str, insecure: bool) -> None:
        partial = self.path + "-partial"
        fd = os.open(partial, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.ftruncate(fd, self.total)
            direct = self._direct_url(url, insecure)
            inner, errors = threading.Event(), []
            workers = [threading.Thread(target=self._part_worker, args=(fd, direct, part, inner, errors), daemon=True)
                       for part in self.parts if part.completed != part.size]  # fmt: skip
            for worker in workers:  # errgroup limit numDownloadParts: never more parts than that
                worker.start()
            for worker in workers:
                worker.join()
            if errors:
                raise errors[0]
        finally:
            os.close(fd)
        for i in range(len(self.parts)):
            os.remove(f"{partial}-{i}")
        os.rename(partial, self.path)

    def _direct_url(self, url: str, insecure: bool) -> str:
        """The blob's GET: a redirect to the same host is followed, one elsewhere is the answer; then Location."""
        hostname = urllib.parse.urlsplit(url).hostname

        def follow(old: str, new: str, via: int) -> bool:
            if via > 10:
                raise PullError("maximum redirects exceeded (10) for directURL")
            return urllib.parse.urlsplit(new).hostname == hostname

        deadline, attempt = time.monotonic() + DIRECT_URL_SECONDS, 0
        while True:
            if self.cancelled.is_set():
                raise Canceled()
            try:
                resp = make_request_with_retry("GET", url, None, insecure, follow)
            except PullError as e:
                log("WARN", "failed to get direct URL; backing off and retrying", err=e)
                attempt += 1
                delay = min(attempt * attempt * 0.01, 10) * random.uniform(0.5, 1.5)
                if time.monotonic() + delay > deadline:
                    raise PullError("context deadline exceeded") from None
                if self.cancelled.wait(delay):
                    raise Canceled() from None
                continue
            resp.close()
            if resp.status not in (307, 200):
                raise PullError(f"unexpected status code {resp.status}")
            location = resp.headers.get("Location")
            if not location:
                raise PullError("http: no Location header in response")
            return urllib.parse.urljoin(resp.url, location)

    def _part_worker(self, fd: int, direct: str, part: Part, inner: threading.Event, errors: list) -> None:
        attempt, err = 0, None
        while attempt < MAX_RETRIES:
            try:
                self._download_chunk(fd, direct, part, inner)
                return
            except Canceled as e:
                err = e
                break
            except PartStalled:
                log("INFO", f"{self.digest[7:19]} part {part.n} stalled; retrying. If this persists, press ctrl-c to "
                            "exit, then 'ollama pull' to find a faster connection.")  # fmt: skip
                continue
            except OSError as e:
                err = PullError(str(e))
                if e.errno == 28:  # ENOSPC: no retry
                    break
            except PullError as e:
                err = e
            sleep = 2**attempt
            log("INFO", f"{self.digest[7:19]} part {part.n} attempt {attempt} failed: {err}, retrying in {sleep}s")
            if inner.wait(sleep) or self.cancelled.is_set():
                err = Canceled()
                break
            attempt += 1
        else:
            err = PullError(f"max retries exceeded: {err}")
        errors.append(err)
        inner.set()

    def _download_chunk(self, fd: int, direct: str, part: Part, inner: threading.Event) -> None:
        start, want = part.offset + part.completed, part.size - part.completed
        # http.DefaultClient: no headers but the Range; the status is not looked at, as upstream does not
        resp = http_request("GET", direct, {"Range": f"bytes={start}-{part.offset + part.size - 1}",
                                            "User-Agent": "Go-http-client/1.1"})  # fmt: skip
        n, err = 0, None
        try:
            while n < want:
                if inner.is_set() or self.cancelled.is_set():
                    err = Canceled()
                    break
                try:
                    data = resp.resp.read1(min(1 << 16, want - n))
                except TimeoutError:
                    err = PartStalled()
                    break
                except http.client.IncompleteRead:
                    err = UnexpectedEOF()
                    break
                except OSError as e:
                    err = PullError(str(e))
                    break
                if not data:  # the body ended: cut short (Content-Length unmet) or a short answer (io.EOF)
                    err = UnexpectedEOF() if resp.resp.length else PullError("EOF")
                    break
                os.pwrite(fd, data, start + n)
                n += len(data)
                self._add(len(data))
        finally:
            resp.close()
        if err is not None and not isinstance(err, Canceled | UnexpectedEOF | PartStalled):
            self._add(-n)  # rollback progress
            raise err
        part.completed += n
        self._write_part(part)
        if err is not None:
            raise err

    def wait(self, fn: Callable[[dict], None], cancelled: Callable[[], bool]) -> None:
        with self.lock:
            self.references += 1
        try:
            self.prepared.wait()
            while not self.done.wait(PROGRESS_SECONDS):
                if cancelled():
                    raise Canceled()
                fn(_progress(f"pulling {self.digest[7:19]}", self.digest, self.total, self.completed))
            if self.err is not None:
                raise self.err
        finally:
            with self.lock:
                self.references -= 1
                last = self.references == 0
            if last:
                self.cancelled.set()


def download_blob(n: Name, digest: str, insecure: bool, fn, cancelled) -> bool:
    """downloadBlob: True for a cache hit (the blob is on disk already)."""
    if not digest:
        raise PullError(f"{n.display_namespace_model()}: digest is empty")
    try:
        path = manifest.blobs_path(digest)
    except manifest.InvalidDigest as e:
        raise PullError(str(e)) from None
    if os.path.exists(path):
        size = os.path.getsize(path)
        fn(_progress(f"pulling {digest[7:19]}", digest, size, size))
        return True
    with _downloads_lock:
        download = _downloads.get(digest)
        new = download is None
        if new:
            download = _downloads[digest] = BlobDownload(path, digest)
    if new:
        url = f"{n.base_url()}/v2/{n.display_namespace_model()}/blobs/{digest}"
        try:
            download.prepare(url, insecure)
        except BaseException as e:
            with _downloads_lock:
                _downloads.pop(digest, None)
            download.err = e if isinstance(e, PullError) else PullError(str(e))
            download.prepared.set()
            download.done.set()
            raise download.err from None
        threading.Thread(target=download.run, args=(url, insecure), daemon=True).start()
    download.wait(fn, cancelled)
    return False


def verify_blob(digest: str) -> None:
    path = manifest.blobs_path(digest)
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
    if f"sha256:{sha.hexdigest()}" != digest:
        os.remove(path)
        raise PullError(f"digest mismatch, file must be downloaded again: want {digest}, got sha256:{sha.hexdigest()}")


def pull_model(name: str, insecure: bool, fn: Callable[[dict], None], cancelled: Callable[[], bool]) -> None:
    n = parse_name(name)
    unused = set()
    try:
        old = manifest.parse_named(n)
        unused = {layer.get("digest", "") for layer in [*old.layers, old.config]} - {""}
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as e:
        log("WARN", "pulling model with bad existing manifest", name=name, error=e)
    if n.scheme == "http" and not insecure:
        raise PullError("insecure protocol http")
    fn(_progress("pulling manifest"))
    try:
        resp = make_request_with_retry("GET", f"{n.base_url()}/v2/{n.display_namespace_model()}/manifests/{n.tag}",
                                       {"Accept": MANIFEST_MEDIA_TYPE}, insecure)  # fmt: skip
        raw = resp.read()
        data = json.loads(raw)
    except (PullError, ValueError) as e:
        raise PullError(f"pull model manifest: {e}") from None
    layers = list(data.get("layers") or [])
    if (data.get("config") or {}).get("digest"):
        layers.append(data["config"])
    if any(layer.get("mediaType") == TENSOR_MEDIA_TYPE for layer in layers):
        raise PullError("this model requires MLX support, but the MLX runtime is not available")
    skip_verify: dict[str, bool] = {}
    for layer in layers:
        digest = layer.get("digest", "")
        hit = download_blob(n, digest, insecure, fn, cancelled)
        skip_verify[digest] = skip_verify.get(digest, True) and hit
        unused.discard(digest)
    fn(_progress("verifying sha256 digest"))
    for layer in layers:
        if not skip_verify[layer["digest"]]:
            verify_blob(layer["digest"])
    fn(_progress("writing manifest"))
    path = os.path.join(manifest.manifests_path(), n.filepath())
    os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
    with open(path, "wb") as f:
        f.write(raw)
    if not envconfig.no_prune() and unused:
        fn(_progress("removing unused layers"))
        manifest.delete_unused_layers(unused)
    fn(_progress("success"))
