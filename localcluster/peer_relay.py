"""A ZooKeeper node's peer relay in the local cluster (core/routes.PeerRelay says why).

    python -m localcluster.peer_relay LISTEN_HOST:PORT UPSTREAM_HOST:PORT

Accepts connections (the WAN emulator's, from other regions) and connects each to the node's
peer port, retrying for up to CONNECT_WAIT_S while that port is not open yet (a leader being
elected opens it a moment after its followers decide to follow); then copies bytes both ways
until either side closes. A connection whose upstream never opens is closed, as a refused
connect would have been.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

CONNECT_WAIT_S = 5.0
CONNECT_RETRY_S = 0.02
CHUNK_BYTES = 1 << 16


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host.startswith("127.") or not port.isdigit():
        raise SystemExit(f"peer_relay: {text!r}: expected a loopback HOST:PORT")
    return host, int(port)


async def _connect(upstream: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CONNECT_WAIT_S
    while True:
        try:
            return await asyncio.open_connection(*upstream)
        except OSError:
            if loop.time() >= deadline:
                raise
            await asyncio.sleep(CONNECT_RETRY_S)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(CHUNK_BYTES):
            writer.write(chunk)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def _serve_one(
    upstream: tuple[str, int], client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
) -> None:
    try:
        server_r, server_w = await _connect(upstream)
    except OSError:
        client_w.close()
        return
    await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))


async def main(listen: tuple[str, int], upstream: tuple[str, int]) -> None:
    running: set[asyncio.Task[None]] = set()  # referenced until done

    def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(_serve_one(upstream, reader, writer))
        running.add(task)
        task.add_done_callback(running.discard)

    server = await asyncio.start_server(handle, *listen, reuse_address=True)
    print(f"peer relay {listen[0]}:{listen[1]} -> {upstream[0]}:{upstream[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(
            "usage: python -m localcluster.peer_relay LISTEN_HOST:PORT UPSTREAM_HOST:PORT"
        )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(_address(sys.argv[1]), _address(sys.argv[2])))
