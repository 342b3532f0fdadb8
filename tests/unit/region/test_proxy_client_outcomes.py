"""The client follows each answer's outcome (docs/http-api.md, "Errors"): a plain write whose
answer is indefinite is not retried and raises OutcomeUnknownError; an idempotent one is
retried through indefinite answers and raises OutcomeUnknownError only at its deadline (or on
a definite answer after an indefinite one); a definite answer stays itself. Against a small
in-process HTTP server on loopback that answers from a script."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from core.errors import (
    OutcomeUnknownError,
    ProxyUnreachableError,
    SeqMismatchError,
    SessionExpiredError,
)
from region.client import ProxyClient
from tests.support.loopback import serving

Script = Callable[[int], tuple[int, dict[str, object]] | None]  # None: no answer at all

ACK = (200, {"dlsn": "1.0.0", "txid": 1, "seq": 0})
DUPLICATE = (200, {"dlsn": "1.0.0", "txid": 1, "seq": 0, "duplicate": True})
UNKNOWN = (
    503,
    {
        "code": "outcome_unknown",
        "message": "a write to n/s may have been appended: it was accepted, then owner_fenced",
        "retriable": True,
        "outcome": "unknown",
        "cause": "owner_fenced",
    },
)
EXPIRED = (
    503,
    {
        "code": "metadata_session_expired",
        "message": "the session ended",
        "retriable": True,
        "outcome": "not_applied",
    },
)
MISMATCH = (
    409,
    {"code": "seq_mismatch", "message": "next is 4", "retriable": False, "outcome": "not_applied"},
)


class Server:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.calls = 0
        self.released = asyncio.Event()  # ends the answers held back, at the server's stop

    async def records(self, request: web.Request) -> web.Response:
        self.calls += 1
        await request.read()
        answer = self.script(self.calls)
        if answer is None:
            await self.released.wait()  # longer than the client waits: it never gets an answer
            answer = ACK
        status, body = answer
        return web.Response(status=status, text=json.dumps(body), content_type="application/json")


async def serve(server: Server) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/namespaces/{ns}/streams/{stream}/records", server.records)
    async with serving(app, shutdown_timeout_s=2) as url:
        try:
            yield url
        finally:
            server.released.set()  # before the server stops: it waits for its handlers


def client(url: str, deadline_s: float = 5.0) -> ProxyClient:
    return ProxyClient([url], "n", deadline_s=deadline_s, request_timeout_s=0.3)


async def test_a_plain_write_answered_outcome_unknown_is_not_retried() -> None:
    server = Server(lambda _: UNKNOWN)
    async for url in serve(server):
        async with client(url) as proxies:
            with pytest.raises(OutcomeUnknownError) as raised:
                await proxies.write("s", b"x")
    assert server.calls == 1
    assert raised.value.cause == "owner_fenced" and raised.value.code == "outcome_unknown"


async def test_a_plain_write_without_an_answer_may_have_been_written() -> None:
    server = Server(lambda _: None)
    async for url in serve(server):
        async with client(url) as proxies:
            with pytest.raises(OutcomeUnknownError, match="may have been appended") as raised:
                await proxies.write("s", b"x")
    assert server.calls == 1 and raised.value.cause == "proxy_unreachable"


async def test_a_plain_write_retries_a_definite_retriable_answer() -> None:
    server = Server(lambda call: EXPIRED if call < 3 else ACK)
    async for url in serve(server):
        async with client(url) as proxies:
            acked = await proxies.write("s", b"x")
    assert server.calls == 3 and acked.seq == 0


async def test_a_definite_answer_is_raised_as_itself() -> None:
    server = Server(lambda _: MISMATCH)
    async for url in serve(server):
        async with client(url) as proxies:
            with pytest.raises(SeqMismatchError):
                await proxies.write("s", b"x", expected_seq=3)
    assert server.calls == 1


async def test_a_definite_retriable_answer_past_the_deadline_is_raised_as_itself() -> None:
    server = Server(lambda _: EXPIRED)
    async for url in serve(server):
        async with client(url, deadline_s=0.3) as proxies:
            with pytest.raises(SessionExpiredError):
                await proxies.write("s", b"x")
    assert server.calls >= 2


async def test_an_idempotent_write_is_retried_through_indefinite_answers() -> None:
    server = Server(lambda call: {1: UNKNOWN, 2: None}.get(call, DUPLICATE))
    async for url in serve(server):
        async with client(url) as proxies:
            acked = await proxies.producer("s", producer_id=7).write(b"x")
    assert server.calls == 3 and acked.duplicate


async def test_an_idempotent_write_indefinite_until_its_deadline_stays_unknown() -> None:
    server = Server(lambda call: UNKNOWN if call == 1 else EXPIRED)
    async for url in serve(server):
        async with client(url, deadline_s=0.5) as proxies:
            with pytest.raises(OutcomeUnknownError) as raised:
                await proxies.producer("s", producer_id=7).write(b"x")
    assert server.calls >= 2, "retried until the deadline"
    assert raised.value.cause == "owner_fenced"
    assert isinstance(raised.value.__cause__, SessionExpiredError), "chained to the last try"


async def test_an_idempotent_write_ended_by_a_definite_answer_after_an_unknown_one() -> None:
    server = Server(lambda call: UNKNOWN if call == 1 else MISMATCH)
    async for url in serve(server):
        async with client(url) as proxies:
            with pytest.raises(OutcomeUnknownError, match="the last try: seq_mismatch"):
                await proxies.producer("s", producer_id=7).write(b"x")
    assert server.calls == 2


async def test_a_refused_connection_never_carried_the_write() -> None:
    async with client("http://127.0.0.1:1", deadline_s=0.3) as proxies:
        with pytest.raises(ProxyUnreachableError) as raised:
            await proxies.write("s", b"x")
    assert raised.value.maybe_sent is False
