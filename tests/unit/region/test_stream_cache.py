"""A read proxy's stream cache follows its stream through its reader's failures: restarted
after the newest cached record (from the first readable one when a truncation passed it),
failing reads with the cause while it is not following, done with a stream that was deleted,
and never serving a long poll past a record that left the cache while it waited. Driven by
scripted record sources (no ZooKeeper)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from core.dlsn import DLSN
from core.errors import MetadataUnavailableError, StreamNotFoundError, TruncatedPositionError
from core.records import LogRecord
from global_meta.followers import FollowerState, RestartBackoff
from reader.positions import By, Position
from region.reads.stream_cache import CacheBudget, RecordSource, StreamCache, Waiters

Item = LogRecord | Exception | None
QUICK = RestartBackoff(first_s=0.001, cap_s=0.001)  # restarts at once: the test waits on opens
LONG_WAIT_S = 10.0  # a long poll the test never lets run out


def record(seq: int) -> LogRecord:
    return LogRecord(DLSN(1, seq, 0), seq, seq, f"r{seq}".encode(), 0, "eu-west")


class Source:
    """A record source that hands out what the test puts in it, then waits."""

    def __init__(self, start: Position) -> None:
        self.start = start
        self.items: asyncio.Queue[Item] = asyncio.Queue()
        self.idle = asyncio.Event()  # set when the cache has taken every item and waits
        self.closed = False
        self.at_end = True  # False: as a reader still reading records that are there

    async def read_next(self, timeout_s: float | None = None) -> LogRecord | None:
        if self.items.empty():
            self.idle.set()
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
        self.first_readable_seq = 0  # opens by seq before it fail, as the reader's do
        self.created_ms: int | None = 1  # the stream's creation (None: deleted)

    async def identify(self) -> int:
        if self.created_ms is None:
            raise StreamNotFoundError("stream 's0' does not exist")
        return self.created_ms

    async def __call__(self, start: Position) -> RecordSource:
        if self.failures:
            raise self.failures.pop(0)
        if self.failing is not None:
            raise self.failing
        if start.by is By.SEQ and int(start.value) < self.first_readable_seq:
            raise TruncatedPositionError(
                f"stream 's0': sequence id {start.value} is truncated; the first readable one "
                f"is {self.first_readable_seq}"
            )
        source = Source(start)
        await self.opened.put(source)
        return source


def cache_of(
    opener: Opener, failed: asyncio.Event | None = None, records_max: int = 1000
) -> StreamCache:
    return StreamCache(
        cast(Any, None),
        cast(Any, None),
        "s0",
        records_max,
        open_source=opener,
        identify=opener.identify,
        restart_backoff=QUICK,
        on_failed=None if failed is None else lambda status: failed.set(),
    )


def seqs(records: list[LogRecord] | None) -> list[int]:
    assert records is not None, "served from the cache"
    return [r.seq for r in records]


def no_session() -> MetadataUnavailableError:
    return MetadataUnavailableError("children '/s0/segments': no ZooKeeper session")


async def test_a_failed_reader_is_replaced_after_the_newest_cached_record() -> None:
    opener = Opener()
    cache = cache_of(opener)
    await cache.start(0)
    first = await opener.opened.get()
    for seq in range(3):
        await first.items.put(record(seq))
        assert seqs(await cache.read(seq, 10, LONG_WAIT_S)) == [seq]
    waiting = asyncio.create_task(cache.read(3, 10, LONG_WAIT_S))  # a long poll at the tail
    opener.failures.append(no_session())  # the first restart fails too: no session yet
    await first.items.put(no_session())
    second = await opener.opened.get()
    assert first.closed and second.start == Position(By.SEQ, 3)
    assert cache.status().state is FollowerState.RUNNING and cache.status().restarts == 2
    await second.items.put(record(3))
    assert seqs(await waiting) == [3]
    assert seqs(await cache.read(0, 10, 0)) == [0, 1, 2, 3]
    await cache.close()
    assert second.closed


async def test_a_short_wait_is_not_answered_empty_while_the_reader_reads_records_there() -> None:
    """A first page with wait_ms=0 on a stream with records came back empty while the new
    read-ahead was still reading them: asked again the same way, a client could be answered
    so for ever. While the reader is catching up, a page waits for its first record (up to
    CATCH_UP_S); once the reader is at the end, a short wait is short again."""
    opener = Opener()
    cache = cache_of(opener)
    await cache.start(0)
    source = await opener.opened.get()
    source.at_end = False
    page = asyncio.create_task(cache.read(0, 10, 0))
    await asyncio.sleep(0.3)  # past a few of the cache's looks at the reader's end
    assert not page.done()
    await source.items.put(record(0))
    assert seqs(await page) == [0]
    source.at_end = True
    began = asyncio.get_running_loop().time()
    assert seqs(await cache.read(1, 10, 0)) == []
    assert asyncio.get_running_loop().time() - began < 0.1
    source.at_end = False
    page = asyncio.create_task(cache.read(1, 10, 0))
    await asyncio.sleep(0.05)
    source.at_end = True  # read to the end without record 1: the page ends at the next look
    assert seqs(await asyncio.wait_for(page, 1.0)) == []
    await cache.close()


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
    assert seqs(await cache.read(0, 10, 0)) == [0], "what is cached is served"
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


async def test_a_restart_after_a_truncation_passed_the_cache_goes_on_from_the_first_readable() -> (
    None
):
    """Retention truncated the stream past the cache's next record while the cache was down:
    it goes on from the first readable record (not restarting for ever), notes the gap, and
    leaves reads from inside the gap to a reader of their own (position_truncated)."""
    opener = Opener()
    cache = cache_of(opener)
    await cache.start(0)
    first = await opener.opened.get()
    for seq in range(3):
        await first.items.put(record(seq))
        assert seqs(await cache.read(seq, 10, LONG_WAIT_S)) == [seq]
    waiting = asyncio.create_task(cache.read(3, 10, LONG_WAIT_S))  # a long poll at the tail
    opener.first_readable_seq = 10  # records 0..9 truncated while ZooKeeper was away
    await first.items.put(no_session())
    second = await opener.opened.get()
    assert second.start == Position.earliest()
    assert await waiting is None, "the long poll is not served from after the gap"
    assert not cache.covers(10), "nothing is known to be readable before its first record"
    second.idle.clear()
    await second.items.put(record(10))
    await second.items.put(record(11))
    await second.idle.wait()
    assert seqs(await cache.read(10, 10, LONG_WAIT_S)) == [10, 11]
    assert cache.status().state is FollowerState.RUNNING and cache.status().restarts == 1
    assert not cache.covers(0) and not cache.covers(3), "reads in the gap go to their own reader"
    assert cache.start_seq == 10 and cache.next_seq == 12
    assert len(cache.gaps) == 1 and isinstance(cache.gaps[0], TruncatedPositionError)
    assert "sequence id 3 is truncated" in str(cache.gaps[0])
    await cache.close()
    assert second.closed


async def test_a_long_poll_whose_record_a_burst_evicted_is_not_served_past_it() -> None:
    """A long poll waits at the tail for record 4; a catch-up burst brings 4..12 at once and
    the bounded cache evicts 4 before the poll wakes: it must not get a page from 9 on."""
    opener = Opener()
    cache = cache_of(opener, records_max=4)
    await cache.start(0)
    source = await opener.opened.get()
    for seq in range(4):
        await source.items.put(record(seq))
    assert seqs(await cache.read(0, 10, LONG_WAIT_S)) == [0, 1, 2, 3]  # in one step
    waiting = asyncio.create_task(cache.read(4, 10, LONG_WAIT_S))
    await asyncio.sleep(0)  # one turn of the loop: the poll starts and parks at the tail
    for seq in range(4, 13):
        source.items.put_nowait(record(seq))  # taken in one step: 4 is evicted at once
    assert await waiting is None, "record 4 left the cache: read it elsewhere"
    assert not cache.covers(4)
    assert seqs(await cache.read(9, 10, 0)) == [9, 10, 11, 12]
    await cache.close()


async def test_the_proxys_budget_takes_from_the_least_recently_read_cache_first() -> None:
    caches: list[StreamCache] = []  # least recently read first
    budget = CacheBudget(most=40, order=lambda: caches)  # 20 records of 2 bytes ("rN")
    opener = Opener()
    for _ in range(2):
        cache = StreamCache(
            cast(Any, None), cast(Any, None), "s0", open_source=opener, budget=budget
        )
        caches.append(cache)
        await cache.start(0)
    old, new = caches
    old_source, new_source = await opener.opened.get(), await opener.opened.get()
    for seq in range(10):
        await old_source.items.put(record(seq))
    assert seqs(await old.read(9, 10, LONG_WAIT_S)) == [9]
    for seq in range(13):  # r0..r9 of 2 bytes, r10..r12 of 3: past 40, down to 35 each time
        await new_source.items.put(record(seq))
    assert seqs(await new.read(12, 10, LONG_WAIT_S)) == [12]
    assert budget.used == 35 == old.bytes + new.bytes
    assert new.bytes == 29 and seqs(await new.read(0, 20, 0)) == list(range(13))
    # the least recently read gave its oldest records up
    assert not old.covers(6) and seqs(await old.read(7, 10, 0)) == [7, 8, 9]
    # Every record given up: it covers only what comes next; earlier reads go elsewhere.
    old.shed(old.bytes)
    assert old.holds_nothing and not old.covers(9) and old.covers(10)
    assert old.start_seq == 10
    await old.close()
    await new.close()
    assert budget.used == 0


async def test_a_record_wakes_only_the_long_polls_it_answers() -> None:
    """Point 7 of hostile clients: polls far ahead of the stream are not woken by every
    record that arrives; a poll at the tail is, and a closing cache wakes them all."""
    opener = Opener()
    cache = cache_of(opener)
    await cache.start(0)
    source = await opener.opened.get()
    at_tail = asyncio.create_task(cache.read(0, 10, LONG_WAIT_S))
    ahead = [asyncio.create_task(cache.read(1000 + i, 10, LONG_WAIT_S)) for i in range(50)]
    await asyncio.sleep(0)
    assert len(cache.waiters) == 51
    for seq in range(20):
        await source.items.put(record(seq))
    assert seqs(await at_tail)[0] == 0
    for _ in range(10_000):  # until every record is taken
        if seqs(await cache.read(0, 100, 0))[-1] == 19:
            break
        await asyncio.sleep(0)
    assert not any(poll.done() for poll in ahead) and len(cache.waiters) == 50
    assert cache.waiters.woken == 1  # the poll at the tail only, whatever the records
    await cache.close()
    assert [await poll for poll in ahead] == [None] * 50  # served by readers of their own
    assert len(cache.waiters) == 0


async def test_long_polls_that_gave_up_are_let_go() -> None:
    waiters = Waiters()
    for _ in range(10):  # 10 rounds of 100 abandoned polls far ahead
        polls = [asyncio.create_task(waiters.wait(10**9)) for _ in range(100)]
        await asyncio.sleep(0)
        for poll in polls:
            poll.cancel()
        await asyncio.gather(*polls, return_exceptions=True)
    assert len(waiters) < 2 * Waiters.COMPACT_AT  # not 1000
    late = asyncio.create_task(waiters.wait(5))
    await asyncio.sleep(0)
    waiters.wake_up_to(4)
    await asyncio.sleep(0)
    assert not late.done()
    waiters.wake_up_to(5)
    await late


async def test_each_record_is_encoded_once_for_all_its_readers_within_the_bounds() -> None:
    """A read proxy's tails of one stream each encoded every record they sent; the cache now
    keeps each record's encoding, made at the first reader's asking, and counts its bytes
    with the record's (so the proxy's budget bounds them too)."""
    made: list[int] = []

    def encode(r: LogRecord) -> bytes:
        made.append(r.seq)
        return b"<%d>" % r.seq  # 3 bytes for 0..9

    budget = CacheBudget(most=1000, order=lambda: [])
    opener = Opener()
    cache = StreamCache(
        cast(Any, None), cast(Any, None), "s0", open_source=opener, budget=budget, encode=encode
    )
    await cache.start(0)
    source = await opener.opened.get()
    for seq in range(6):
        await source.items.put(record(seq))
    assert seqs(await cache.read(5, 10, LONG_WAIT_S)) == [5]
    page = await cache.read(0, 10, 0)
    assert page is not None and len(page) == 6
    assert cache.encoded(page[2:5]) == [b"<2>", b"<3>", b"<4>"]
    assert cache.encoded(page) == [b"<%d>" % seq for seq in range(6)]
    assert cache.encoded(page) == [b"<%d>" % seq for seq in range(6)]
    assert sorted(made) == list(range(6))  # once each, for three askings
    assert cache.bytes == 6 * 2 + 6 * 3 == budget.used
    # records the cache did not serve (a reader of its own read them) are not its to encode
    assert cache.encoded([record(1)]) is None
    cache.shed(5)  # r0 and its encoding (5 bytes) go
    assert cache.bytes == 25 == budget.used and not cache.covers(0)
    assert cache.encoded(page) is None  # it no longer holds the whole run
    await cache.close()
    assert budget.used == 0


async def following(opener: Opener, records: int) -> tuple[StreamCache, Source]:
    """A started cache that has read `records` records from its first source."""
    cache = cache_of(opener)
    await cache.start(0)
    first = await opener.opened.get()
    for seq in range(records):
        await first.items.put(record(seq))
    assert seqs(await cache.read(records - 1, 10, LONG_WAIT_S)) == [records - 1]
    return cache, first


async def test_a_paused_read_ahead_keeps_its_records_and_resumes_after_the_newest() -> None:
    """An idle stream's read-ahead stops following (its reader closed: no polls while no one
    reads) and keeps what it holds; resumed, it reads on from the record after the newest,
    and a record written meanwhile is served. Not while a long poll waits on it (a poll that
    gave up does not count), nor when a request read it since the sweep looked."""
    opener = Opener()
    cache, first = await following(opener, 3)
    assert await cache.read(3, 10, 0.01) == [], "a long poll that gave up"
    waiting = asyncio.create_task(cache.read(3, 10, LONG_WAIT_S))
    await asyncio.sleep(0.01)
    assert not cache.pausable, "a long poll waits on it"
    assert not await cache.pause(read_before=1e9) and not first.closed
    await first.items.put(record(3))
    assert seqs(await waiting) == [3]
    assert cache.pausable, "the poll that gave up is not waiting"
    cache.read_at = 5.0
    assert not await cache.pause(read_before=5.0), "read since"
    assert await cache.pause(read_before=1e9)
    assert cache.paused and first.closed and opener.opened.empty()
    assert seqs(await cache.read(0, 10, 0)) == [0, 1, 2, 3], "its records stay"
    assert await cache.resume()
    assert not await cache.resume(), "following already"
    second = await opener.opened.get()
    assert second.start == Position(By.SEQ, 4) and not cache.paused
    await second.items.put(record(4))
    assert seqs(await cache.read(4, 10, LONG_WAIT_S)) == [4]
    assert cache.status().state is FollowerState.RUNNING
    await cache.close()
    assert second.closed


async def test_a_resume_that_cannot_open_a_reader_fails_the_request_and_stays_paused() -> None:
    opener = Opener()
    cache, _ = await following(opener, 1)
    assert await cache.pause(read_before=1e9)
    opener.failures.append(no_session())
    with pytest.raises(MetadataUnavailableError):
        await cache.resume()
    assert cache.paused, "the next request tries again"
    assert await cache.resume()
    assert (await opener.opened.get()).start == Position(By.SEQ, 1)
    await cache.close()


@pytest.mark.parametrize("made_again", [False, True])
async def test_a_stream_deleted_while_its_read_ahead_was_paused_leaves_it_gone(
    made_again: bool,
) -> None:
    """No watch follows a paused stream: a resume finds it deleted, or deleted and made again
    under its name, and the read-ahead is gone (the proxy starts afresh) rather than serving
    the old stream's records and reading the new one from where the old one ended."""
    opener = Opener()
    cache, _ = await following(opener, 3)
    assert await cache.pause(read_before=1e9)
    opener.created_ms = 2 if made_again else None
    assert not await cache.resume()
    assert cache.gone and opener.opened.empty(), "no reader opened on another stream"
    await cache.close()
