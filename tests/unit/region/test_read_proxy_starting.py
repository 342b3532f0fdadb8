"""The read proxy's table of streams whose read-ahead is being started holds an entry only
while a request starts or waits for one: names that do not exist, asked once each, leave
nothing behind, and requests for one stream share one start."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from core.errors import StreamNotFoundError
from region import read_proxy
from region.read_proxy import ReadProxy
from region.registry import ProxyInfo

pytestmark = pytest.mark.unit


class FakeCache:
    started_count = 0

    def __init__(self, streams: Any, ledgers: Any, stream: str, on_failed: Any) -> None:
        self.stream = stream
        self.started = False
        self.gone = False

    async def start(self, seq: int) -> None:
        await asyncio.sleep(0.01)
        if self.stream.startswith("missing"):
            raise StreamNotFoundError(f"no stream {self.stream!r}")
        FakeCache.started_count += 1
        self.started = True


def proxy(monkeypatch: pytest.MonkeyPatch) -> ReadProxy:
    monkeypatch.setattr(read_proxy, "StreamCache", FakeCache)
    me = ProxyInfo("rp-test", "us-east", "http://127.0.0.1:1")
    return ReadProxy(me, cast(Any, None), cast(Any, None))


async def test_names_that_do_not_exist_leave_no_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    server = proxy(monkeypatch)
    for i in range(500):
        with pytest.raises(StreamNotFoundError):
            await server._cache("ns", f"missing-{i}", 0)
    assert server._starting == {} and server._caches == {}


async def test_concurrent_requests_share_one_start_and_leave_no_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = proxy(monkeypatch)
    FakeCache.started_count = 0
    starts = [asyncio.create_task(server._cache("ns", "s", 0)) for _ in range(20)]
    await asyncio.sleep(0)
    assert list(server._starting) == [("ns", "s")] and server._starting[("ns", "s")].users == 20
    caches = await asyncio.gather(*starts)
    assert len({id(c) for c in caches}) == 1 and FakeCache.started_count == 1
    assert server._starting == {}
