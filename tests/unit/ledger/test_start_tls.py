"""The START_TLS greeting's failure paths end, and what it reads is bounded: against fake
bookies on loopback that answer too much, refuse TLS, close, or never answer."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from ledger.codecs.message_codec import pb
from ledger.codes import OperationType, StatusCode
from ledger.connections.connection import BookieConnection, ConnectionConfig
from ledger.connections.start_tls import ANSWER_BYTES_MAX
from ledger.errors import BookieConnectionError, BookieProtocolError, BookieUnavailableError

pytestmark = pytest.mark.unit
GUARD_S = 10.0

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def fake_bookie(answer: Answer) -> AsyncIterator[str]:
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


def start_tls_answer(status: StatusCode) -> bytes:
    message = pb.Response()
    message.header.version = 3
    message.header.operation = OperationType.START_TLS
    message.header.txnId = 0
    message.status = status
    body = message.SerializeToString()
    return len(body).to_bytes(4, "big") + body


async def open_tls(address: str, connect_timeout_s: float = 5.0) -> BookieConnection:
    config = ConnectionConfig(tls=ssl.create_default_context(), connect_timeout_s=connect_timeout_s)
    return await asyncio.wait_for(BookieConnection.open(address, address, config), GUARD_S)


async def test_an_answer_larger_than_its_bound_is_refused_without_reading_it() -> None:
    async def huge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(64)
        writer.write((10 * 1024 * 1024).to_bytes(4, "big") + b"x" * 4096)
        await writer.drain()
        await reader.read()  # until the client gives up and closes

    async with fake_bookie(huge) as address:
        with pytest.raises(BookieProtocolError, match=f"at most {ANSWER_BYTES_MAX} bytes"):
            await open_tls(address)


async def test_a_bookie_without_tls_is_named_so() -> None:
    async def refuses(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(64)
        writer.write(start_tls_answer(StatusCode.EBADREQ))
        await writer.drain()

    async with fake_bookie(refuses) as address:
        with pytest.raises(BookieUnavailableError, match="refused START_TLS with EBADREQ"):
            await open_tls(address)


async def test_a_bookie_that_closes_or_never_answers_ends_the_attempt() -> None:
    async def closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(64)
        writer.close()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers; ends when the client gives up and closes

    async with fake_bookie(closes) as address:
        with pytest.raises(BookieConnectionError, match="closed before answering START_TLS"):
            await open_tls(address)
    async with fake_bookie(silent) as address:
        with pytest.raises(BookieUnavailableError, match=r"no connection within 0\.5 s"):
            await open_tls(address, connect_timeout_s=0.5)


async def test_a_failed_handshake_is_named_so() -> None:
    async def answers_then_garbage(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.read(64)
        writer.write(start_tls_answer(StatusCode.EOK))
        await writer.drain()
        await reader.read(4096)  # the ClientHello
        writer.write(b"not a TLS record" * 4)
        await writer.drain()

    async with fake_bookie(answers_then_garbage) as address:
        with pytest.raises(BookieConnectionError):
            await open_tls(address)
