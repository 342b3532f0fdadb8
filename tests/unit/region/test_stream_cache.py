"""A read proxy's stream cache follows its stream through its reader's failures: restarted
after the newest cached record, failing reads with the cause while it is not following, and
done with a stream that was deleted. Driven by scripted record sources (no ZooKeeper)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from core.dlsn import DLSN
from core.errors import MetadataUnavailableError, StreamNotFoundError
from core.records import LogRecord
from global_meta.followers import FollowerState, RestartBackoff
from region.stream_cache import RecordSource, StreamCache

Item = LogRecord | Exception | None
QUICK = RestartBackoff(first_s=0.001, cap_s=0.001)  # restarts at once: the test waits on opens
LONG_WAIT_S = 10.0  # a long poll the test never lets run out


def record(seq: int) -> LogRecord:
    return LogRecord(DLSN(1, seq, 0), seq, seq, f"r{seq}".encode(), 0, "eu-west")


class Source:
    """A record source that hands out what the test puts in it, then waits."""

    def __init__(self, start_seq: int) -> None:
        self.start_seq = start_seq
        self.items: asyncio.Queue[Item] = asyncio.Queue()
        self.closed = False

    async def read_next(self, timeout_s: float | None = None) -> LogRecord | None:
        item = await self.items.get()
        if isinstance(item, Exception):
            raise item
        return item

    async def close(self) -> None:
        self.closed = True


class Opener:
    """Opens sources (or fails to, as told) and lets the test see each open."""

    def __init__(self) -> None:
        self.opened: asyncio.Queue[Source] = asyncio.Queue()
        self.failures: list[Exception] = []  # the next opens fail with these, in turn
        self.failing: Exception | None = None  # then every open fails with this one

    async def __call__(self, seq: int) -> RecordSource:
        if self.failures:
            raise self.failures.pop(0)
        if self.failing is not None:
            raise self.failing
        source = Source(seq)
        await self.opened.put(source)
        return source


def cache_of(opener: Opener, failed: asyncio.Event | None = None) -> StreamCache:
    return StreamCache(
        cast(Any, None),
        cast(Any, None),
        "s0",
        open_source=opener,
        restart_backoff=QUICK,
        on_failed=None if failed is None else lambda status: failed.set(),
    )


def no_session() -> MetadataUnavailableError:
    return MetadataUnavailableError("children '/s0/segments': no ZooKeeper session")


async def test_a_failed_reader_is_replaced_after_the_newest_cached_record() -> None:
    opener = Opener()
    cache = cache_of(opener)
    await cache.start(0)
    first = await opener.opened.get()
    for seq in range(3):
        await first.items.put(record(seq))
        assert [r.seq for r in await cache.read(seq, 10, LONG_WAIT_S)] == [seq]
    waiting = asyncio.create_task(cache.read(3, 10, LONG_WAIT_S))  # a long poll at the tail
    opener.failures.append(no_session())  # the first restart fails too: no session yet
    await first.items.put(no_session())
    second = await opener.opened.get()
    assert first.closed and second.start_seq == 3
    assert cache.status().state is FollowerState.RUNNING and cache.status().restarts == 2
    await second.items.put(record(3))
    assert [r.seq for r in await waiting] == [3]
    assert [r.seq for r in await cache.read(0, 10, 0)] == [0, 1, 2, 3]
    await cache.close()
    assert second.closed


async def test_while_not_following_a_read_with_nothing_new_fails_with_the_cause() -> None:
    opener, failed = Opener(), asyncio.Event()
    cache = cache_of(opener, failed)
    await cache.start(0)
    source = await opener.opened.get()
    await source.items.put(record(0))
    await cache.read(0, 1, LONG_WAIT_S)
    opener.failing = no_session()  # ZooKeeper stays away
    await source.items.put(no_session())
    await failed.wait()
    assert cache.status().state is FollowerState.RESTARTING
    assert [r.seq for r in await cache.read(0, 10, 0)] == [0], "what is cached is served"
    with pytest.raises(MetadataUnavailableError, match="no ZooKeeper session"):
        await cache.read(1, 10, 0)
    assert cache.status().last_error is not None
    assert "no ZooKeeper session" in cache.status().last_error
    await cache.close()


async def test_a_deleted_stream_ends_the_cache_instead_of_restarting_it() -> None:
    opener = Opener()
    cache = cache_of(opener)
    await cache.start(0)
    source = await opener.opened.get()
    opener.failures.append(StreamNotFoundError("stream 's0' does not exist"))
    await source.items.put(no_session())
    with pytest.raises(StreamNotFoundError):
        await cache.read(0, 10, LONG_WAIT_S)
    assert cache.gone and cache.status().state is FollowerState.FINISHED
    await cache.close()
