"""Our tunnel against OpenSSH's `ssh -L`, both through a real sshd on loopback, in one run.

Usage (as root, from the repository root; needs openssh-server):
    .venv/bin/python bench/tunnel.py [MEGABYTES]     # default 200

Starts sshd and an HTTP/1.1 server on 127.0.0.1, then measures, directly and through each tunnel:
throughput of a MEGABYTES download (median of 5), and p50/p95 latency of 200 small requests on one keep-alive
connection (as a browser holds it). Goals: throughput >= 0.8x and p50 <= 2x of `ssh -L`.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import report
from tests.loopback_sshd import Sshd, free_port, missing

REQUESTS = 200
DOWNLOADS = 5
HTTP_SERVER = textwrap.dedent(
    """
    import http.server, sys
    class Handler(http.server.SimpleHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # as Kestrel (SwarmUI) does
        def log_message(self, *args): pass
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])),
        lambda *a: Handler(*a, directory=sys.argv[2])).serve_forever()
    """
)
OUR_TUNNEL = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from gpu_rent.to_vm.ssh import Target, connect
    from gpu_rent.to_vm.tunnel import Tunnel
    port, local, remote, key, known = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    target = Target("127.0.0.1", "root", Path(key), Path(known), "bench", port=port)
    async def main():
        tunnel = Tunnel(lambda: connect(target), local, remote)
        await tunnel.listen()
        await tunnel.run(on_up=lambda: print("up", flush=True))
    asyncio.run(main())
    """
)


def wait_port(port: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def request(sock: socket.socket, path: str, buf: bytearray) -> int:
    """One GET on a keep-alive connection; the body's length."""
    sock.sendall(f"GET /{path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed")
        head += chunk
    header, _, body = head.partition(b"\r\n\r\n")
    length = int(next(x for x in header.split(b"\r\n") if x.lower().startswith(b"content-length")).split(b":")[1])
    got = len(body)
    view = memoryview(buf)
    while got < length:
        n = sock.recv_into(view, min(len(buf), length - got))
        if not n:
            raise RuntimeError("short body")
        got += n
    return length


def measure(port: int, big: str) -> tuple[float, float, float]:
    """(MB/s of the download, p50 ms, p95 ms) through 127.0.0.1:port."""
    buf = bytearray(4 * 1024 * 1024)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        request(s, "small", buf)  # warm: the channel is open
        times = []
        for _ in range(REQUESTS):
            started = time.perf_counter()
            request(s, "small", buf)
            times.append((time.perf_counter() - started) * 1000)
    speeds = []
    for _ in range(DOWNLOADS):  # 2 cores carry client, tunnel, sshd and server: the median of several
        with socket.create_connection(("127.0.0.1", port)) as s:
            started = time.perf_counter()
            size = request(s, big, buf)
            speeds.append(size / 1e6 / (time.perf_counter() - started))
    mbps = statistics.median(speeds)
    times.sort()
    return mbps, statistics.median(times), times[int(len(times) * 0.95) - 1]


def main() -> int:
    reason = missing()
    if reason:
        print(f"bench/tunnel.py: {reason}")
        return 2
    megabytes = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp, Sshd(Path(tmp) / "sshd") as sshd:
        www = Path(tmp) / "www"
        www.mkdir()
        (www / "small").write_bytes(b"x" * 700)  # about one SwarmUI API answer
        with open(www / "big", "wb") as f:
            for _ in range(megabytes):
                f.write(bytes(1024 * 1024))
        try:
            http = free_port()
            procs.append(subprocess.Popen([sys.executable, "-c", HTTP_SERVER, str(http), str(www)]))
            wait_port(http)
            openssh, openssh_tty = free_port(), free_port()
            login = [
                "ssh",
                "-p",
                str(sshd.port),
                "-i",
                str(sshd.client_key),
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
            ]
            # as the issue measures it (no shell: sshd keeps Nagle on), and with a terminal open beside it
            procs.append(
                subprocess.Popen([*login, "-N", "-L", f"127.0.0.1:{openssh}:127.0.0.1:{http}", "root@127.0.0.1"])
            )
            procs.append(subprocess.Popen(
                [*login, "-tt", "-L", f"127.0.0.1:{openssh_tty}:127.0.0.1:{http}", "root@127.0.0.1", "sleep 600"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            ))  # fmt: skip
            ours = free_port()
            known = Path(tmp) / "known_hosts"
            ours_proc = subprocess.Popen(
                [sys.executable, "-c", OUR_TUNNEL, str(sshd.port), str(ours), str(http), str(sshd.client_key),
                 str(known)], stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            procs.append(ours_proc)
            wait_port(openssh)
            wait_port(openssh_tty)
            assert ours_proc.stdout.readline().strip() == "up"
            paths = (("direct", http), ("ssh -N -L", openssh), ("ssh -t -L", openssh_tty), ("gpu-rent", ours))
            results = {name: measure(port, "big") for name, port in paths}
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(5)
    print(f"{megabytes} MB download and {REQUESTS} small requests on one keep-alive connection, loopback sshd")
    print(f"{'path':<11} {'MB/s':>8} {'p50 ms':>8} {'p95 ms':>8}")
    for name, (mbps, p50, p95) in results.items():
        print(f"{name:<11} {mbps:>8.0f} {p50:>8.2f} {p95:>8.2f}")
    our = results["gpu-rent"]
    for ref in ("ssh -N -L", "ssh -t -L"):
        print(f"RATIO tunnel throughput vs {ref}: {our[0] / results[ref][0]:.2f}x (goal >= 0.8x)")
        print(f"RATIO tunnel p50 latency vs {ref}: {our[1] / results[ref][1]:.2f}x (goal <= 2x)")
        report("throughput", our[0] / results[ref][0], ">= 0.8", ref)
        report("p50-latency", our[1] / results[ref][1], "<= 2", ref)
    return 0


if __name__ == "__main__":
    sys.exit(main())
