"""What a client knows of a bookie's silence: since when it has sent requests the bookie has
answered nothing since (`BookieClient.silent_since_s`), which a new ledger's first adds and a
recovery count their quorum lag from. A long poll, which waits at the bookie by design, is no
silence; an answer ends it; nothing pending, nothing known."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest

from ledger.codecs.frames import RequestFrameDecoder, encode_response
from ledger.codecs.messages import GetBookieInfoRequest, GetBookieInfoResponse, Request
from ledger.codes import StatusCode
from ledger.connections.bookie_client import SILENCE_EVIDENCE_S, WATCH_AGAIN_S, BookieClient
from ledger.drivers.context import silent_last

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


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Polls the client's counters (no event to wait on) for up to 10 s."""
    try:
        async with asyncio.timeout(10):
            while not condition():  # noqa: ASYNC110 - polling state the client exposes
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"not within 10 s: {what}") from None


async def test_a_watch_keeps_a_question_pending_at_each_bookie_so_a_silence_is_dated() -> None:
    bookie, clock = QuietBookie(), [100.0]
    async with client_of(bookie, clock) as client:
        seen: list[str] = []
        client._observe = lambda _bookie, operation, _s, _healthy: seen.append(operation)
        watch = asyncio.ensure_future(client.watch(lambda: [BOOKIE], every_s=0.01))
        try:
            await _until(lambda: client.pending_requests(BOOKIE) == 1, "a question")
            request, _ = await asyncio.wait_for(bookie.requests.get(), 10)
            assert isinstance(request, GetBookieInfoRequest) and request.requested == 0
            bookie.requests.put_nowait((request, _))
            # the client sent the bookie nothing of its own: the watch's question dates it,
            # as evidence once it has been pending SILENCE_EVIDENCE_S
            assert client.silent_since_s(BOOKIE) == 100.0
            assert client.silent_since_s(BOOKIE, SILENCE_EVIDENCE_S) is None, "just sent"
            clock[0] = 100.0 + SILENCE_EVIDENCE_S + 0.01
            assert client.silent_since_s(BOOKIE, SILENCE_EVIDENCE_S) == 100.0
            await asyncio.sleep(0.1)
            assert client.pending_requests(BOOKIE) == 1, "one question until WATCH_AGAIN_S"
            clock[0] = 100.0 + WATCH_AGAIN_S
            await _until(lambda: client.pending_requests(BOOKIE) == 2, "a second question")
            clock[0] = 200.0
            await asyncio.sleep(0.1)
            assert client.pending_requests(BOOKIE) == 2, "never a third"
            # a cut that dropped the first question ends with the second's answer
            await bookie.answer_next_info()
            await _until(lambda: seen == ["probe"], "the answer, reported as a probe")
            # no longer silent since 100: at most since a question asked after the answer
            assert client.silent_since_s(BOOKIE) in (None, 200.0)
        finally:
            watch.cancel()
            await asyncio.wait([watch])
        assert client.pending_requests(BOOKIE) == 0, "its questions went with it"
        assert client.silent_since_s(BOOKIE) is None


async def test_a_probes_answer_leaves_the_silence_other_requests_date() -> None:
    """A bookie whose journal stalls answers probes (off its journal) but not adds."""
    bookie, clock = QuietBookie(), [100.0]
    async with client_of(bookie, clock) as client:
        poll_free = asyncio.ensure_future(client.read_lac(BOOKIE, 7))  # never answered
        await _until(lambda: client.silent_since_s(BOOKIE) == 100.0, "the read sent")
        clock[0] = 101.0
        watch = asyncio.ensure_future(client.watch(lambda: [BOOKIE], every_s=0.01))
        try:
            await _until(lambda: client.pending_requests(BOOKIE) == 2, "a question")
            await bookie.answer_next_info()
            await _until(lambda: client.pending_requests(BOOKIE) == 1, "the question answered")
            assert client.silent_since_s(BOOKIE) == 100.0, "the read is still unanswered"
        finally:
            watch.cancel()
            poll_free.cancel()
            await asyncio.wait([watch, poll_free])


def test_reads_ask_the_bookies_a_client_sees_silent_last() -> None:
    order = ("b0", "b1", "b2", "b3")
    assert silent_last(order, lambda b: b in ("b0", "b2")) == ("b1", "b3", "b0", "b2")
    assert silent_last(order, lambda b: False) == order
    assert silent_last(order, lambda b: True) == order
