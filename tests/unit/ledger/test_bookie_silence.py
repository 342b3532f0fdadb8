"""What a client knows of a bookie's silence: since when it has sent requests the bookie has
answered nothing since (`BookieClient.silent_since_s`), which a new ledger's first adds and a
recovery count their quorum lag from. A long poll, which waits at the bookie by design, is no
silence; an answer ends it; nothing pending, nothing known."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from ledger.codecs.frames import RequestFrameDecoder, encode_response
from ledger.codecs.messages import GetBookieInfoRequest, GetBookieInfoResponse, Request
from ledger.codes import StatusCode
from ledger.connections.bookie_client import BookieClient

pytestmark = pytest.mark.unit
BOOKIE = "bookie-1"


class QuietBookie:
    """A bookie on a local port that answers a bookie-info request only when told to, and
    nothing else ever (a bookie behind a cut, until `answer`)."""

    def __init__(self) -> None:
        self.requests: asyncio.Queue[tuple[Request, asyncio.StreamWriter]] = asyncio.Queue()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = RequestFrameDecoder()
        while data := await reader.read(65536):
            for request in decoder.feed(data):
                await self.requests.put((request, writer))

    async def answer_next_info(self) -> None:
        while True:
            request, writer = await asyncio.wait_for(self.requests.get(), 10)
            if isinstance(request, GetBookieInfoRequest):
                writer.write(
                    encode_response(GetBookieInfoResponse(request.txn_id, StatusCode.EOK, 1, 1))
                )
                return


@contextlib.asynccontextmanager
async def client_of(bookie: QuietBookie, clock: list[float]) -> AsyncIterator[BookieClient]:
    server = await asyncio.start_server(bookie.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with BookieClient(lambda _: f"127.0.0.1:{port}", clock=lambda: clock[0]) as client:
            yield client
    finally:
        server.close()


async def test_a_bookie_is_silent_since_the_first_request_it_left_unanswered() -> None:
    bookie, clock = QuietBookie(), [100.0]
    async with client_of(bookie, clock) as client:
        assert client.silent_since_s(BOOKIE) is None
        poll = asyncio.ensure_future(client.read_lac_long_poll(BOOKIE, 7, 3, 10_000))
        await asyncio.sleep(0.1)
        assert client.pending_requests(BOOKIE) == 1
        assert client.silent_since_s(BOOKIE) is None, "a long poll waits by design"
        clock[0] = 101.0
        first = asyncio.ensure_future(client.get_bookie_info(BOOKIE))
        await asyncio.sleep(0.1)
        clock[0] = 102.0
        second = asyncio.ensure_future(client.get_bookie_info(BOOKIE))
        await asyncio.sleep(0.1)
        assert client.silent_since_s(BOOKIE) == 101.0, "from the first left unanswered"
        await bookie.answer_next_info()
        await asyncio.wait_for(first, 10)
        assert client.silent_since_s(BOOKIE) is None, "it answered: not silent"
        clock[0] = 103.0
        third = asyncio.ensure_future(client.get_bookie_info(BOOKIE))
        await asyncio.sleep(0.1)
        assert client.silent_since_s(BOOKIE) == 103.0, "the second was sent before its answer"
        for request in (second, third):
            request.cancel()
        await asyncio.wait([second, third])
        assert client.pending_requests(BOOKIE) == 1  # the long poll
        assert client.silent_since_s(BOOKIE) is None, "nothing pending it could have answered"
        poll.cancel()
        await asyncio.wait([poll])
        assert client.pending_requests(BOOKIE) == 0
