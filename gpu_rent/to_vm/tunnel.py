"""The local forward 127.0.0.1:LOCAL_PORT → the VM's 127.0.0.1:REMOTE_PORT over one SSH connection, and
beside it any other forward (the LLM runtime's LLM_LOCAL_PORT → LLM_REMOTE_PORT) over the same connection.

Every accepted socket gets TCP_NODELAY and its own SSH channel, with backpressure both ways.
The listener outlives the SSH connection: when SSH drops, the supervisor reconnects with backoff
and connections that arrive meanwhile wait for it (the browser sees a slow request, not a refused
one). Measured by bench/tunnel.py against OpenSSH's `ssh -L`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import sys
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import asyncssh

from gpu_rent.to_vm.ssh import HostKeyChanged, SshError, make_interactive, nodelay

# Per-channel flow control: a window this large keeps a 200 MB download streaming on a fast link.
WINDOW = 8 * 1024 * 1024
PACKET = 256 * 1024
BUFFER = 4 * 1024 * 1024  # bytes queued towards the browser before the SSH channel is paused
# A connection that arrives while SSH is down waits this long for it before it is closed.
WAIT_FOR_SSH = 30.0
BACKOFF = (1, 2, 4, 8, 15, 30)


class PortBusy(Exception):
    """LOCAL_PORT is taken by another program."""


class _Channel(asyncssh.SSHTCPSession):
    """The VM's side of one forwarded connection: bytes from SSH go to the local socket."""

    def __init__(self, peer: _Local):
        self.peer = peer

    def data_received(self, data, datatype) -> None:
        self.peer.transport.write(data)

    def eof_received(self) -> bool:
        if self.peer.transport.can_write_eof():
            self.peer.transport.write_eof()
        return True

    def connection_lost(self, exc) -> None:
        self.peer.transport.close()

    def pause_writing(self) -> None:  # the SSH window is full: stop reading from the browser
        self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        self.peer.transport.resume_reading()


class Forward(NamedTuple):
    """One listener on 127.0.0.1:local_port whose connections go to the VM's remote_port."""

    local_port: int
    remote_port: int
    setting: str = "LOCAL_PORT"  # the key of gpu-rent.vars that picks local_port, for a taken port's message


class _Local(asyncio.Protocol):
    """The browser's side of one forwarded connection."""

    def __init__(self, tunnel: Tunnel, remote_port: int):
        self.tunnel = tunnel
        self.remote_port = remote_port
        self.transport: asyncio.Transport | None = None
        self.channel: asyncssh.SSHTCPChannel | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        nodelay(transport.get_extra_info("socket"))
        # asyncio's 64 KiB default would pause the SSH channel after every 256 KiB packet
        transport.set_write_buffer_limits(high=BUFFER)
        transport.pause_reading()
        self.task = asyncio.ensure_future(self._open())

    async def _open(self) -> None:
        conn = await self.tunnel.connection(WAIT_FOR_SSH)
        if conn is None or self.transport.is_closing():
            self.transport.close()
            return
        try:
            channel, _ = await conn.create_connection(
                lambda: _Channel(self), self.tunnel.remote_host, self.remote_port, window=WINDOW, max_pktsize=PACKET,
            )  # fmt: skip
        except (asyncssh.Error, OSError) as e:
            self.tunnel.log(f"the VM refused a forwarded connection to port {self.remote_port}: {e}")
            self.transport.close()
            return
        self.channel = channel
        channel.set_write_buffer_limits(high=BUFFER)
        self.tunnel.opened += 1
        if self.transport.is_closing():
            channel.close()
            return
        self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        self.channel.write(data)

    def eof_received(self) -> bool:
        if self.channel is not None:
            self.channel.write_eof()
        return True  # keep the socket half-open: the VM's answer still comes back

    def connection_lost(self, exc) -> None:
        if self.channel is not None:
            self.channel.close()

    def pause_writing(self) -> None:  # the browser reads slower than the VM sends
        if self.channel is not None:
            self.channel.pause_reading()

    def resume_writing(self) -> None:
        if self.channel is not None:
            self.channel.resume_reading()


class Tunnel:
    """Listen on 127.0.0.1:local_port (and each of `also`); keep one SSH connection up through `connect`,
    reconnecting; every forward shares it."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncssh.SSHClientConnection]],
        local_port: int,
        remote_port: int,
        log: Callable[[str], None] = lambda message: None,
        remote_host: str = "127.0.0.1",
        also: tuple[Forward, ...] = (),
    ):
        self._connect = connect
        self.forwards = (Forward(local_port, remote_port), *also)
        self.remote_host = remote_host
        self.log = log
        self.opened = 0  # forwarded connections so far (tests and the watchdog read it)
        self.reconnects = 0
        self._conn: asyncssh.SSHClientConnection | None = None
        self._up = asyncio.Event()
        self._servers: list[asyncio.Server] = []
        self._fatal: BaseException | None = None
        self.paused = False  # the watchdog pauses reconnecting while it brings the VM back

    @property
    def local_port(self) -> int:
        return self.forwards[0].local_port

    @property
    def remote_port(self) -> int:
        return self.forwards[0].remote_port

    async def listen(self) -> None:
        """Bind every local port (PortBusy when one is taken, and then none stays bound); 127.0.0.1 only."""
        bound = []
        try:
            for forward in self.forwards:
                server = await self._bind(forward)
                self._servers.append(server)
                bound.append(forward._replace(local_port=server.sockets[0].getsockname()[1]))
        except BaseException:
            for server in self._servers:
                server.close()
            self._servers = []
            raise
        self.forwards = tuple(bound)

    async def _bind(self, forward: Forward) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        try:
            return await loop.create_server(
                lambda: _Local(self, forward.remote_port),
                "127.0.0.1",
                forward.local_port,
                backlog=256,
                # Linux's SO_REUSEADDR only skips TIME_WAIT; BSD's (macOS) would share a port in use
                reuse_address=sys.platform.startswith("linux"),
            )
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES) or isinstance(e, PermissionError):
                raise PortBusy(
                    f"127.0.0.1:{forward.local_port} is taken by another program ({forward.setting} in "
                    f"gpu-rent.vars picks another port)"
                ) from None
            raise

    async def connection(self, wait: float) -> asyncssh.SSHClientConnection | None:
        """The live SSH connection, waiting up to `wait` s for one; None when it does not come."""
        if self._conn is not None:
            return self._conn
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            await asyncio.wait_for(self._up.wait(), wait)
        return self._conn

    def drop(self) -> None:
        """Close the SSH connection (the supervisor reconnects unless paused)."""
        if self._conn is not None:
            self._conn.close()

    async def run(self, on_up: Callable[[], None] = lambda: None) -> None:
        """Keep SSH up for ever: connect, wait for it to close, reconnect with backoff.

        Raises HostKeyChanged at once: another machine at the address is not retried into.
        """
        failures = 0
        while True:
            while self.paused:
                await asyncio.sleep(0.2)
            try:
                conn = await self._connect()
            except HostKeyChanged:
                raise
            except SshError as e:
                delay = BACKOFF[min(failures, len(BACKOFF) - 1)]
                failures += 1
                self.log(f"SSH: {e}; again in {delay}s")
                await asyncio.sleep(delay)
                continue
            if failures or self.reconnects:
                self.log("SSH connected again; the tunnel forwards")
            failures = 0
            if not await make_interactive(conn):
                self.log("SSH: the VM refused a terminal session; small requests may each take 40 ms longer")
            self._conn = conn
            self._up.set()
            on_up()
            started = time.monotonic()
            await conn.wait_closed()
            self._up.clear()
            self._conn = None
            self.reconnects += 1
            self.log(f"SSH connection closed after {time.monotonic() - started:.0f}s; reconnecting")

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        if self._conn is not None:
            self._conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._conn.wait_closed(), 3)
