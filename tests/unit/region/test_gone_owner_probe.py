"""`refuses_connections`: how a write proxy tells an owner whose process is gone (nothing
listens at its address) from one that may still run, before it breaks the owner's lock."""

from __future__ import annotations

import asyncio
import socket

from region.registry import refuses_connections


def _free_port() -> int:
    """A loopback port nothing listens at (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_an_address_nothing_listens_at_refuses() -> None:
    assert await refuses_connections(f"https://127.0.0.1:{_free_port()}")


async def test_a_listening_address_is_not_taken_for_gone() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        assert not await refuses_connections(f"http://127.0.0.1:{port}")


async def test_a_process_that_accepts_and_answers_nothing_is_not_taken_for_gone() -> None:
    """A paused process: its kernel still completes the handshake (the listen backlog)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # never accepted: as a stopped process's socket
        port = listener.getsockname()[1]
        assert not await refuses_connections(f"https://127.0.0.1:{port}", timeout_s=0.5)


async def test_a_url_without_a_host_is_not_taken_for_gone() -> None:
    assert not await refuses_connections("not a url")
