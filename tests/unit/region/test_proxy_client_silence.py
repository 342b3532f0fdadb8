"""A proxy that stops answering (a paused or frozen process: its sockets stay open, nothing
comes back) is noticed within the client's silence bound and a probe, not its request timeout:
the client goes to another proxy naming the silent one as the unreachable owner. A proxy that
is slow but alive answers the probe, and its answer is waited for. Against small in-process
HTTP servers on loopback."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
from aiohttp import web

from core.answers import PROXY_HEADER
from core.errors import OutcomeUnknownError
from region.client import ProxyClient
from tests.support.loopback import serving

pytestmark = pytest.mark.unit

SILENCE_S, PROBE_S = 0.2, 0.3
ACK = {"dlsn": "1.0.0", "txid": 1, "seq": 0}


class Proxy:
    """A write proxy's few routes: `stalled` holds every request without a word (health
    included), `slow_s` delays record answers while health answers at once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stalled = False
        self.slow_s = 0.0
        self.redirect_to: tuple[str, str] | None = None  # (owner name, its URL)
        self.seen: list[dict[str, str]] = []  # each record request's query
        self.probes = 0
        self.released = asyncio.Event()

    async def _hold(self) -> None:
        await self.released.wait()

    def _answer(self, status: int, body: dict[str, object], **headers: str) -> web.Response:
        return web.Response(
            status=status,
            text=json.dumps(body),
            content_type="application/json",
            headers={PROXY_HEADER: self.name, **headers},
        )

    async def records(self, request: web.Request) -> web.Response:
        await request.read()
        self.seen.append(dict(request.query))
        if self.stalled:
            await self._hold()
        if self.redirect_to is not None and "unreachable_owner" not in request.query:
            owner, url = self.redirect_to
            location = f"{url}{request.rel_url}"
            body = {"code": "redirect", "owner": owner, "location": location}
            return self._answer(307, body, Location=location)
        await asyncio.sleep(self.slow_s)
        return self._answer(200, ACK)

    async def health(self, _: web.Request) -> web.Response:
        self.probes += 1
        if self.stalled:
            await self._hold()
        return self._answer(200, {"status": "serving"})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/namespaces/{ns}/streams/{stream}/records", self.records)
        app.router.add_get("/v1/health", self.health)
        return app


@asynccontextmanager
async def running(*proxies: Proxy) -> AsyncIterator[list[str]]:
    async with AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(serving(p.app(), 2)) for p in proxies]
        try:
            yield urls
        finally:
            for proxy in proxies:
                proxy.released.set()  # before the servers stop: they wait for their handlers


def client(urls: list[str]) -> ProxyClient:
    return ProxyClient(
        urls, "n", deadline_s=10.0, request_timeout_s=10.0, silence_s=SILENCE_S, probe_s=PROBE_S
    )


def homed_at(proxies: ProxyClient, url: str) -> str:
    """A stream name whose home on the client's ring is `url`."""
    for i in range(1000):
        if proxies._proxy_for(f"s{i}") == url:
            return f"s{i}"
    raise AssertionError(f"no stream homed at {url}")


async def test_a_silent_owner_is_left_for_another_proxy_named_unreachable() -> None:
    """The owner answered once (so its name is known from its header), then stalls: the next
    idempotent write goes to the other proxy with `unreachable_owner` set, well within the
    request timeout."""
    a, b = Proxy("wp-a@r1"), Proxy("wp-b@r2")
    async with running(a, b) as (url_a, url_b), client([url_a, url_b]) as proxies:
        stream = homed_at(proxies, url_a)
        producer = proxies.producer(stream)
        assert proxies.served_by(stream) is None
        await producer.write(b"first")
        assert len(a.seen) == 1 and not b.seen
        assert proxies.served_by(stream) == "wp-a@r1"
        a.stalled = True
        started = time.monotonic()
        await producer.write(b"second")
        took = time.monotonic() - started
        assert proxies.served_by(stream) == "wp-b@r2"  # the history says who answered
    assert b.seen and b.seen[-1].get("unreachable_owner") == "wp-a@r1"
    assert a.probes >= 1
    assert took < SILENCE_S + PROBE_S + 2.0, f"{took:.2f} s: the request timeout was waited"


async def test_an_owner_learnt_from_a_redirect_is_named_when_it_goes_silent() -> None:
    a, b = Proxy("wp-a@r1"), Proxy("wp-b@r2")
    async with running(a, b) as (url_a, url_b):
        b.redirect_to = ("wp-a@r1", url_a)
        a.stalled = True
        async with client([url_b]) as proxies:
            await proxies.producer("s").write(b"x")
    assert [q.get("unreachable_owner") for q in b.seen] == [None, "wp-a@r1"]
    assert len(a.seen) == 1


async def test_a_slow_proxy_that_answers_its_probe_is_waited_for() -> None:
    a = Proxy("wp-a@r1")
    a.slow_s = 4 * (SILENCE_S + PROBE_S)
    async with running(a) as (url_a,), client([url_a]) as proxies:
        await proxies.write("s", b"x")  # a plain write: a retry would have raised
    assert len(a.seen) == 1, "the slow answer was abandoned"
    assert a.probes >= 2, "probed while it worked"


async def test_a_plain_write_to_a_silent_proxy_may_have_been_written() -> None:
    a = Proxy("wp-a@r1")
    a.stalled = True
    async with running(a) as (url_a,), client([url_a]) as proxies:
        started = time.monotonic()
        with pytest.raises(OutcomeUnknownError, match="ProxySilentError"):
            await proxies.write("s", b"x")
    assert time.monotonic() - started < SILENCE_S + PROBE_S + 2.0


async def test_the_proxy_that_took_a_stream_gets_its_next_writes_without_a_redirect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stream's ring home stalls; another proxy takes it and answers. The next writes go
    to that proxy, the owner now, not back to the ring's home once it answers again."""
    monkeypatch.setattr("region.client.proxy_client.DOWN_FOR_S", 1.0)
    a, b = Proxy("wp-a@r1"), Proxy("wp-b@r2")
    async with running(a, b) as (url_a, url_b), client([url_a, url_b]) as proxies:
        stream = homed_at(proxies, url_a)
        producer = proxies.producer(stream)
        await producer.write(b"first")
        a.stalled = True
        await producer.write(b"second")  # to b, naming a unreachable
        a.stalled = False
        a.released.set()
        await asyncio.sleep(1.2)  # a is passed over no longer
        seen_at_a = len(a.seen)
        await producer.write(b"third")
        await proxies.write(stream, b"fourth")
    assert len(a.seen) == seen_at_a, "a write went back to the ring's home"
    assert [q.get("unreachable_owner") for q in b.seen][-2:] == [None, None]
