"""TCP forwarder that lets a ground host reach the cloud's API at the catalogue's own URLs.

The catalogue says http://127.0.0.1:5000 (Keystone), :8774 (Nova) and :9696 (Neutron), loopback of the ground
machine. A host (a container in its own network namespace) has a loopback of its own, so it runs
this forwarder twice removed: inside the host, 127.0.0.1:PORT -> the hosts' gateway; on the
ground machine, the gateway address:PORT -> 127.0.0.1:PORT. The APIs stay on loopback, the hosts
use the very URLs a real VM would, and no other address is involved.

Standard library only: the agent copies this file into each host's root filesystem.
Run: python3 forward.py --listen ADDRESS --to ADDRESS --ports 5000,8774
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()


async def _serve(listen: str, to: str, port: int) -> asyncio.base_events.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(to, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return await asyncio.start_server(handle, listen, port, reuse_address=True)


async def main_async(listen: str, to: str, ports: list[int]) -> None:
    servers = [await _serve(listen, to, port) for port in ports]
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", required=True)
    parser.add_argument("--to", required=True)
    parser.add_argument("--ports", required=True, help="comma-separated")
    args = parser.parse_args()
    asyncio.run(main_async(args.listen, args.to, [int(p) for p in args.ports.split(",")]))


if __name__ == "__main__":
    main()
