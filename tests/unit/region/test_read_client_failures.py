"""The read client's retries end: a read that meets nothing but failures for `failing_max_s`
raises the last one, a non-retriable answer is raised at once, and a page between failures
starts the count again. Against a small in-process HTTP server on loopback."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from core.errors import GlobelogError, MetadataUnavailableError, StreamNotFoundError
from region.client import ProxyUnreachableError, ReadClient
from tests.support.loopback import serving

Answer = Callable[[int], tuple[int, dict[str, object]]]


async def serve(answer: Answer) -> AsyncIterator[str]:
    calls = 0

    async def records(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        status, body = answer(calls)
        return web.Response(status=status, text=json.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_get("/v1/namespaces/{ns}/streams/{stream}/records", records)
    async with serving(app) as url:
        yield url


UNAVAILABLE = (503, {"code": "metadata_unavailable", "message": "no session", "retriable": True})
RECORD = {
    "seq": 0,
    "dlsn": "1.0.0",
    "txid": 1,
    "payload": "a",
    "write_time_ms": 1,
    "region": "us-east",
}


async def test_a_read_that_only_fails_raises_after_its_bound() -> None:
    async for url in serve(lambda _: UNAVAILABLE):
        async with ReadClient([url], failing_max_s=0.5) as reader:
            with pytest.raises(MetadataUnavailableError) as raised:
                async for _ in reader.read("s"):
                    pass
    assert any("served it for" in note for note in raised.value.__notes__)


async def test_a_read_with_no_proxy_answering_raises_after_its_bound() -> None:
    async with ReadClient(["http://127.0.0.1:1"], failing_max_s=0.5) as reader:
        with pytest.raises(ProxyUnreachableError, match="served it for"):
            async for _ in reader.read("s"):
                pass


async def test_a_definite_answer_is_raised_at_once() -> None:
    gone = (404, {"code": "stream_not_found", "message": "no 's'", "retriable": False})
    async for url in serve(lambda _: gone):
        async with ReadClient([url], failing_max_s=60) as reader:
            with pytest.raises(StreamNotFoundError):
                async for _ in reader.read("s"):
                    pass


async def test_a_page_between_failures_starts_the_count_again() -> None:
    def answer(call: int) -> tuple[int, dict[str, object]]:
        if call == 4:
            return 200, {"records": [RECORD]}
        return UNAVAILABLE if call < 8 else (200, {"records": []})

    async for url in serve(answer):
        # 3 failures (0.6 s) + 3 more: over 0.7 s in all, never 0.7 s in a row
        async with ReadClient([url], failing_max_s=0.7) as reader:
            read = [r.seq async for r in reader.read("s", follow=False)]
    assert read == [0]


def test_the_bound_is_checked() -> None:
    with pytest.raises(ValueError, match="failing_max_s 0"):
        ReadClient(["http://127.0.0.1:1"], failing_max_s=0)
    assert issubclass(ProxyUnreachableError, GlobelogError)
