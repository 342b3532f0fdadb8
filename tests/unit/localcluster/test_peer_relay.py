"""The ZooKeeper peer relay: a connection waits for an upstream that opens late, and one whose
upstream never opens is closed within the relay's bound (every await ends)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from localcluster import peer_relay

pytestmark = pytest.mark.unit

LISTENING_TIMEOUT_S = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def connected(address: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the relay once it listens (at most LISTENING_TIMEOUT_S after start)."""
    async with asyncio.timeout(LISTENING_TIMEOUT_S):
        while True:
            try:
                return await asyncio.open_connection(*address)
            except ConnectionRefusedError:
                await asyncio.sleep(0.01)


async def test_a_late_upstream_is_waited_for_and_a_missing_one_closes_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(peer_relay, "CONNECT_WAIT_S", 1.0)
    listen, upstream = ("127.0.0.1", free_port()), ("127.0.0.1", free_port())
    relay = asyncio.ensure_future(peer_relay.main(listen, upstream))
    try:
        reader, writer = await connected(listen)
        await asyncio.sleep(0.3)  # the upstream opens after the connection was accepted

        async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.write(await r.read(100))
            await w.drain()
            w.close()

        server = await asyncio.start_server(echo, *upstream)
        writer.write(b"hello")
        assert await asyncio.wait_for(reader.read(100), 5) == b"hello"
        writer.close()
        server.close()
        await server.wait_closed()

        reader, writer = await asyncio.open_connection(*listen)  # nothing upstream now
        assert await asyncio.wait_for(reader.read(100), 3) == b"", "closed within the bound"
        writer.close()
    finally:
        relay.cancel()
        await asyncio.gather(relay, return_exceptions=True)
