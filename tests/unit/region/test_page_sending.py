"""A large page goes out a slice per turn of the loop, whole and with its length; a client
that takes none of it for `send_timeout_s` has its connection closed and holds nothing."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from region.admission.listener import SEND_SLICE_BYTES, send_page
from region.observability.telemetry import PROXY_METRICS

pytestmark = pytest.mark.unit
MIB = 1024 * 1024


def app_serving(
    body: bytes, send_timeout_s: float, ended: asyncio.Event, send_buffer: int = 0
) -> web.Application:
    async def page(request: web.Request) -> web.StreamResponse:
        if send_buffer and request.transport is not None:  # less than the kernel would take
            sock = request.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        try:
            return await send_page(request, pieces_of(body), send_timeout_s)
        finally:
            ended.set()

    app = web.Application()
    app.router.add_get("/page", page)  # HEAD too
    return app


def pieces_of(body: bytes) -> list[bytes]:
    """`body` in pieces of uneven sizes, some past a slice, some within one (a page's records)."""
    cuts = [0, 1, 1000, 1000 + 3 * SEND_SLICE_BYTES // 2]
    cuts += range(cuts[-1] + 77 * 1024, len(body), 77 * 1024)
    return [body[a:b] for a, b in zip(cuts, [*cuts[1:], len(body)], strict=True) if b > a]


async def reading_nothing(address: tuple[str, int]) -> socket.socket:
    """A client that asks `address` for the page and will read little of it (its receive
    buffer a few KiB) unless the test reads its socket."""
    loop = asyncio.get_running_loop()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.setblocking(False)
    await loop.sock_connect(client, address)
    await loop.sock_sendall(client, b"GET /page HTTP/1.1\r\nHost: x\r\n\r\n")
    return client


async def test_a_large_page_arrives_whole_with_its_length_while_other_work_runs() -> None:
    body = bytes(range(256)) * (12 * MIB // 256) + b"end"
    ended = asyncio.Event()
    turns = 0
    stop = asyncio.Event()

    async def count_turns() -> None:  # runs between the slices
        nonlocal turns
        while not stop.is_set():
            turns += 1
            await asyncio.sleep(0)

    counting = asyncio.ensure_future(count_turns())
    async with (
        TestServer(app_serving(body, 30, ended)) as server,
        aiohttp.ClientSession() as http,
        http.get(server.make_url("/page")) as answer,
    ):
        assert answer.content_length == len(body)
        assert await answer.read() == body
    stop.set()
    await counting
    assert ended.is_set()
    assert turns >= len(body) // SEND_SLICE_BYTES // 2, "the loop ran other work between slices"


async def test_a_small_page_is_sent_as_it_is() -> None:
    ended = asyncio.Event()
    async with (
        TestServer(app_serving(b'{"records": []}', 30, ended)) as server,
        aiohttp.ClientSession() as http,
        http.get(server.make_url("/page")) as answer,
    ):
        assert await answer.read() == b'{"records": []}'


async def test_a_client_that_reads_nothing_is_closed_within_the_send_timeout() -> None:
    body = b"x" * (64 * MIB)  # far more than the socket buffers and the transport take
    ended = asyncio.Event()
    loop = asyncio.get_running_loop()
    unsent = {"route": "/page", "why": "send_timeout"}
    before = PROXY_METRICS.unsent.total(unsent)
    async with TestServer(app_serving(body, 0.5, ended)) as server:
        client = await reading_nothing((server.host, server.port))
        began = loop.time()
        await asyncio.wait_for(ended.wait(), 10)  # once the deadline closed the connection
        assert loop.time() - began >= 0.5
        assert PROXY_METRICS.unsent.total(unsent) == before + 1, "counted as not delivered"
        received = 0
        async with asyncio.timeout(10):
            try:
                while chunk := await loop.sock_recv(client, 1 << 20):
                    received += len(chunk)
            except ConnectionResetError:
                pass  # aborted: a reset once the buffered bytes ran out
        client.close()
        assert received < len(body), "the rest of the page was dropped, not kept for it"


async def test_a_small_page_is_sent_before_the_handler_ends_and_within_the_deadline() -> None:
    """A page of one write, to a client that reads nothing, ends its handler at the deadline
    too (left to aiohttp after the handler, it would wait in its drain for ever)."""
    body = b"y" * SEND_SLICE_BYTES  # the largest sent in one write
    ended = asyncio.Event()
    loop = asyncio.get_running_loop()
    async with TestServer(app_serving(body, 0.5, ended, send_buffer=4096)) as server:
        client = await reading_nothing((server.host, server.port))
        began = loop.time()
        await asyncio.wait_for(ended.wait(), 10)
        assert loop.time() - began >= 0.5 - 0.05
        client.close()


@pytest.mark.parametrize("size", [SEND_SLICE_BYTES, 8 * MIB], ids=["one write", "sliced"])
async def test_a_client_that_goes_away_mid_page_ends_the_send_without_an_error(
    size: int,
) -> None:
    """A reset during the send is the client's going away: the handler ends without raising
    (which the proxies' error middleware would log and count as a bug of theirs)."""
    ended = asyncio.Event()
    errors: list[BaseException] = []

    def app() -> web.Application:
        inner = app_serving(b"z" * size, 30, ended, send_buffer=4096)

        @web.middleware
        async def catch(request: web.Request, handler: Any) -> web.StreamResponse:
            try:
                return cast(web.StreamResponse, await handler(request))
            except BaseException as err:
                errors.append(err)
                raise

        inner.middlewares.append(catch)
        return inner

    gone = {"route": "/page", "why": "client_gone"}
    before = PROXY_METRICS.unsent.total(gone)
    async with served_as_deployed(app()) as address:
        client = await reading_nothing(address)
        await asyncio.sleep(0.3)  # the send waits on the full buffers
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset
        await asyncio.wait_for(ended.wait(), 10)
    assert errors == []
    assert PROXY_METRICS.unsent.total(gone) == before + 1, "counted as not delivered"


@contextlib.asynccontextmanager
async def served_as_deployed(app: web.Application) -> AsyncIterator[tuple[str, int]]:
    """`app` on a port of its own with aiohttp's defaults, as the proxies run it: a handler
    is not cancelled when its client goes away (aiohttp's TestServer cancels it)."""
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.SockSite(runner, socket.create_server(("127.0.0.1", 0)))
        await site.start()
        yield "127.0.0.1", site._sock.getsockname()[1]
    finally:
        await runner.cleanup()


async def test_head_of_a_large_page_leaves_the_connection_usable() -> None:
    body = b"L" * (2 * SEND_SLICE_BYTES)
    ended = asyncio.Event()
    async with (
        TestServer(app_serving(body, 30, ended)) as server,
        aiohttp.ClientSession() as http,
    ):
        for _ in range(2):  # the second on the same connection
            async with http.head(server.make_url("/page")) as answer:
                assert answer.status == 200 and await answer.read() == b""
        async with http.get(server.make_url("/page")) as answer:
            assert await answer.read() == body
