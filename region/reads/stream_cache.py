"""One read-ahead per stream for every reader a read proxy serves.

A cache follows the stream with one LogReader from the first position asked of it and keeps
the newest records (bounded by count and bytes). A request from a sequence id inside the
cached range is served from memory, and waits (long poll) when it asks for the next record
not read yet; a request from before the cached range gets a reader of its own. A long poll
whose record left the cache while it waited (evicted by a burst, or dropped at a truncation)
is told so, and goes to a reader of its own too: a page never starts past the record asked for.

The follow loop runs under a `Follower`: when its reader fails (no ZooKeeper session while
the region is cut off, bookies away) it is restarted with backoff from the record after the
newest cached one, so the cache goes on where it stopped once the cause is gone. If
retention or a truncation passed that record meanwhile, those records are gone for every
reader: the cache goes on from the first readable record, notes the gap (`gaps`) and drops
what it held before it, so a read from inside the gap gets a reader of its own and with it
position_truncated, naming the first readable record, rather than a page from after the gap.
While it is not following, a request that finds nothing new gets the last failure, and the
proxy's health names the stream.

A read-ahead no request read for a while is paused (`pause`): its reader closed, its records
kept. Following an idle stream is a long poll every few seconds and checks of its ledger and
segments (about a request a second to ZooKeeper and the bookies, per stream); a proxy left
holding a thousand read-aheads by a client that read a thousand streams once would spend most
of a core on them. The next request resumes it (`resume`) from the record after the newest
it holds, as a restart does.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from core.errors import (
    DataLossError,
    GlobelogError,
    StreamNotFoundError,
    TruncatedPositionError,
)
from core.records import LogRecord
from global_meta.followers import Follower, FollowerState, FollowerStatus, RestartBackoff
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient
from reader.log_reader import CATCH_UP_STEP_S, LogReader, ReaderConfig
from reader.positions import By, Position

log = logging.getLogger(__name__)
CACHE_RECORDS_MAX = 200_000
CACHE_BYTES_MAX = 64 * 1024 * 1024
GAPS_MAX = 1000  # lost and truncated ranges remembered per cache (the oldest go first)
Encoding = bytes  # a record as a read proxy serves it (JSON)
CATCH_UP_S = ReaderConfig().catch_up_s  # a page waits this long while records are being read


class RecordSource(Protocol):
    """What the cache follows a stream with (a LogReader)."""

    # True while it has read all that is written and waits for more (False: still reading
    # records that are there)
    at_end: bool

    async def read_next(self, timeout_s: float | None = None) -> LogRecord | None: ...

    async def close(self) -> None: ...


SourceOpener = Callable[[Position], Awaitable[RecordSource]]


class CacheBudget:
    """The bytes every read-ahead of a proxy holds together, at most `most`. Past it, the
    least recently read caches drop their oldest records (the one that grew last of all),
    down to 7/8 of `most`; `order` gives the caches least recently read first."""

    def __init__(self, most: int, order: Callable[[], Iterable[StreamCache]]) -> None:
        self.most = most
        self.used = 0
        self._order = order

    def grew(self, growing: StreamCache) -> None:
        if self.used <= self.most:
            return
        target = self.most * 7 // 8
        for cache in [*(c for c in self._order() if c is not growing), growing]:
            if self.used <= target:
                return
            cache.shed(self.used - target)


class Waiters:
    """Long polls waiting for a sequence id. A record wakes only the polls it answers (those
    waiting for it or an earlier one), so a poll far ahead of the stream costs nothing per
    record; a change of state (a failure, a truncation, the end) wakes every one. Polls that
    gave up are let go once they are half of those kept (I10)."""

    COMPACT_AT = 64

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()
        self._gave_up = 0
        self.woken = 0  # polls woken, ever
        self.waiting = 0  # polls waiting now (those that gave up may stay in the heap a while)

    def __len__(self) -> int:
        return len(self._heap)

    async def wait(self, seq: int) -> None:
        """Until a record at or after `seq` arrives, or every poll is woken."""
        woken = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (seq, next(self._ids), woken))
        self.waiting += 1
        try:
            await woken
        finally:
            self.waiting -= 1
            if not woken.done() or woken.cancelled():  # timed out: in the heap until compacted
                woken.cancel()
                self._gave_up += 1
                if self._gave_up >= self.COMPACT_AT and self._gave_up * 2 >= len(self._heap):
                    self._heap = [w for w in self._heap if not w[2].done()]
                    heapq.heapify(self._heap)
                    self._gave_up = 0

    def wake_up_to(self, seq: int) -> None:
        while self._heap and self._heap[0][0] <= seq:
            _, _, woken = heapq.heappop(self._heap)
            if not woken.done():
                woken.set_result(None)
                self.woken += 1

    def wake_all(self) -> None:
        heap, self._heap, self._gave_up = self._heap, [], 0
        for _, _, woken in heap:
            if not woken.done():
                woken.set_result(None)
                self.woken += 1


class StreamCache:
    def __init__(
        self,
        streams: StreamMetaStore,
        ledgers: LedgerClient,
        stream: str,
        records_max: int = CACHE_RECORDS_MAX,
        bytes_max: int = CACHE_BYTES_MAX,
        *,
        on_failed: Callable[[FollowerStatus], None] | None = None,
        open_source: SourceOpener | None = None,
        restart_backoff: RestartBackoff | None = None,
        budget: CacheBudget | None = None,
        encode: Callable[[LogRecord], bytes] | None = None,
        identify: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        self.stream = stream
        # which stream of this name it follows (its creation time): a pause has no watch to
        # see it deleted, and perhaps made again, meanwhile
        self._identify = identify or (lambda: streams.created_ms(stream))
        self._identity: int | None = None
        self._encode = encode
        self._streams = streams
        self._ledgers = ledgers
        self._open_source = open_source or self._open_reader
        self._on_failed = on_failed
        self._restart_backoff = restart_backoff
        self._records: list[LogRecord] = []
        # each record's encoding as served (`encoded`), made when first asked for and kept
        # with it: its bytes count with the record's against the cache's and the proxy's bounds
        self._encodings: list[bytes | None] = []
        self._seqs: list[int] = []
        self._bytes = 0
        self._records_max = records_max
        self._bytes_max = bytes_max
        self._budget = budget
        self.read_at = 0.0  # when a request last read here (the proxy's clock)
        self.waiters = Waiters()
        self._opened: RecordSource | None = None  # the first source, opened by start()
        self._reading: RecordSource | None = None  # the source the follow loop reads
        self._follower: Follower | None = None
        self._failure: BaseException | None = None  # the newest failure of the follow loop
        self._closed = False  # then it covers nothing: its waiters go to readers of their own
        self.paused = False  # not following until the next request resumes it
        self._resuming = asyncio.Lock()
        # The first sequence id the cache holds or waits for: where its reader started, or
        # after a truncation passed it, the first record read since (None until it comes).
        self.start_seq: int | None = None
        # Ranges the cache's readers passed over: lost data, and truncations passed while the
        # cache was not following (the position it could not go on from).
        self.gaps: list[DataLossError | TruncatedPositionError] = []

    @property
    def started(self) -> bool:
        return self._follower is not None

    @property
    def gone(self) -> bool:
        """True once the stream was found deleted: the cache follows it no more."""
        return isinstance(self._failure, StreamNotFoundError)

    def status(self) -> FollowerStatus:
        """The follow loop's state (starting before `start`)."""
        if self._follower is None:
            return FollowerStatus(self.stream, FollowerState.STARTING, 0.0, 0, None)
        return self._follower.status()

    def covers(self, seq: int) -> bool:
        """True when `seq` is served from here (cached, or the next record to arrive)."""
        if self._closed or self.start_seq is None or seq < self.start_seq:
            return False
        return not self._seqs or seq >= self._seqs[0]

    @property
    def holds_nothing(self) -> bool:
        """True while it holds no record (none came yet, or every one was dropped): nothing
        is lost by starting it again elsewhere."""
        return not self._seqs

    @property
    def next_seq(self) -> int | None:
        """The sequence id after the newest cached record (None: after a truncation, until
        the first readable record has come)."""
        if self._seqs:
            return self._seqs[-1] + 1
        return self.start_seq

    async def start(self, seq: int) -> None:
        """Begins following the stream from sequence id `seq` (once). Opening the first
        reader happens here, so its errors (an unknown stream) reach the first request."""
        if self._follower is not None:
            return
        self.start_seq = seq
        self._opened = await self._open_source(Position(By.SEQ, seq))
        self._start_following()

    def _start_following(self) -> None:
        self._follower = Follower(
            f"stream cache of {self.stream!r}",
            self._follow,
            backoff=self._restart_backoff,
            on_failed=self._on_failed,
        )
        self._follower.start()

    @property
    def pausable(self) -> bool:
        """Following, and no request waits on it (a long poll of an idle stream is a reader)."""
        return self._follower is not None and not (
            self.paused or self._closed or self.waiters.waiting
        )

    async def pause(self, read_before: float) -> bool:
        """Stops following if no request read here since `read_before` (the proxy's clock);
        the records stay (see the module docstring). Whether it paused."""
        async with self._resuming:
            if not self.pausable or self.read_at >= read_before or self._follower is None:
                return False
            try:
                self._identity = await self._identify()
            except GlobelogError as err:  # deleted (its follower will say so), or no ZooKeeper
                log.debug("stream cache of %r not paused: %s", self.stream, err)
                return False
            await self._follower.stop()
            self.paused = True  # only once its follower stopped: never two at once
            if self._opened is not None:  # stopped before its loop took the first reader
                await self._opened.close()
                self._opened = None
            return True

    async def resume(self) -> bool:
        """Follows again from the record after the newest held; whether it reopened a reader
        for that. A stream deleted (or deleted and made again) while it was paused leaves it
        gone instead: what it holds is not that stream's. A request's errors (ZooKeeper away)
        leave it paused, and the next request tries again."""
        async with self._resuming:
            if not self.paused or self._closed:
                return False
            try:
                identity = await self._identify()
            except StreamNotFoundError as err:
                identity, self._failure = None, err
            if identity != self._identity:
                if identity is not None:
                    self._failure = StreamNotFoundError(
                        f"stream {self.stream!r} was deleted and made again while its "
                        "read-ahead was paused"
                    )
                self._notify()
                return False
            source = await self._reopen()
            if self._closed:  # closed meanwhile (by the proxy's sweep, or its stop)
                await source.close()
                return False
            self._opened = source
            self._failure = None
            self.paused = False
            self._start_following()
            return True

    async def _open_reader(self, position: Position) -> RecordSource:
        return await LogReader.open(
            self._streams, self._ledgers, self.stream, position, ReaderConfig()
        )

    async def _reopen(self) -> RecordSource:
        """A reader from the record after the newest cached one; from the first readable
        record when a truncation or retention passed that one while the cache was down."""
        next_seq = self.next_seq
        if next_seq is not None:
            try:
                return await self._open_source(Position(By.SEQ, next_seq))
            except TruncatedPositionError as truncated:
                self._truncated(truncated)
        return await self._open_source(Position.earliest())

    def _truncated(self, truncated: TruncatedPositionError) -> None:
        """The records from `next_seq` up to the first readable one are gone for every reader.
        The cache holds only records before them (a truncation is a prefix of the stream): it
        drops them, and holds nothing until the first readable record comes, so no page is
        served across the gap and a read from inside it goes to a reader of its own."""
        log.warning(
            "stream cache of %r: %s; going on from the first readable record",
            self.stream,
            truncated,
        )
        self._gap(truncated)
        self._drop(len(self._records))
        self.start_seq = None
        self._notify()  # a long poll in the gap learns it is no longer served from here

    async def _follow(self, following: Callable[[], None]) -> None:
        """Reads the stream into the cache; a restart goes on after the newest record."""
        source, self._opened = self._opened, None
        try:
            if source is None:
                source = await self._reopen()
            self._reading = source
            following()
            self._failure = None
            while True:
                try:
                    record = await source.read_next()
                except DataLossError as gap:
                    self._gap(gap)
                    continue
                if record is None:
                    return  # sealed: nothing follows
                self._append(record)
                self.waiters.wake_up_to(record.seq)
        except StreamNotFoundError as err:  # deleted: nothing to restart for
            self._failure = err
        except Exception as err:
            self._failure = err
            raise
        finally:
            self._reading = None
            self._notify()  # waiters see the failure (or the end) at once
            if source is not None:
                await source.close()

    def _notify(self) -> None:
        self.waiters.wake_all()

    def _gap(self, gap: DataLossError | TruncatedPositionError) -> None:
        self.gaps.append(gap)
        del self.gaps[:-GAPS_MAX]

    @property
    def bytes(self) -> int:
        return self._bytes

    def _append(self, record: LogRecord) -> None:
        if self.start_seq is None:  # the first readable record after a truncation
            self.start_seq = record.seq
        self._records.append(record)
        self._encodings.append(None)
        self._seqs.append(record.seq)
        self._grow(len(record.payload))

    def _grow(self, size: int) -> None:
        """Counts `size` more bytes held, and keeps within the bounds."""
        self._bytes += size
        if self._budget is not None:
            self._budget.used += size
        over = len(self._records) - self._records_max
        while over > 0 or self._bytes > self._bytes_max:
            self._drop(max(over, len(self._records) // 8, 1))
            over = len(self._records) - self._records_max
        if self._budget is not None:
            self._budget.grew(self)

    def encoded(self, records: list[LogRecord]) -> list[Encoding] | None:
        """The encodings of `records`, a run of records this cache served (`read`): each
        record is encoded once, however many readers are served it (a read proxy's many
        tails of one stream encoded every record once each). None when the cache has no
        encoder, or no longer holds the run."""
        if self._encode is None or not records:
            return None
        first = bisect.bisect_left(self._seqs, records[0].seq)
        end = first + len(records)
        held = self._records
        if end > len(held) or held[first] is not records[0] or held[end - 1] is not records[-1]:
            return None
        encodings = self._encodings
        made = 0
        for index in range(first, end):
            if encodings[index] is None:
                encoding = encodings[index] = self._encode(held[index])
                made += len(encoding)
        found = [e for e in encodings[first:end] if e is not None]
        if made:
            self._grow(made)  # (may drop records: what was found is the caller's)
        return found

    def shed(self, size: int) -> None:
        """Drops the oldest records until `size` bytes are freed or none is left (for the
        proxy's budget over every cache)."""
        freed = 0
        count = 0
        for record, encoding in zip(self._records, self._encodings, strict=True):
            if freed >= size:
                break
            freed += len(record.payload) + len(encoding or b"")
            count += 1
        self._drop(count)

    def _drop(self, count: int) -> None:
        """Drops the `count` oldest records. Dropping them all leaves the cache covering only
        what comes next: a request for one of them gets a reader of its own."""
        if count <= 0 or not self._records:
            return
        size = sum(len(r.payload) for r in self._records[:count])
        size += sum(len(e) for e in self._encodings[:count] if e is not None)
        if count >= len(self._records):
            self.start_seq = self._seqs[-1] + 1
        self._bytes -= size
        if self._budget is not None:
            self._budget.used -= size
        del self._records[:count]
        del self._encodings[:count]
        del self._seqs[:count]

    async def read(
        self, seq: int, max_records: int, wait_s: float, *, catch_up: bool = True
    ) -> list[LogRecord] | None:
        """Records from sequence id `seq` on (at most `max_records`); waits up to `wait_s`
        for the first when none is there yet. Needs `covers(seq)`. None when `seq` is no
        longer covered once the wait is over (evicted by a burst of newer records, or dropped
        at a truncation): the caller reads it as any position before the cache, since a page
        from here would start past it. With nothing to give while the cache is not
        following, raises its newest failure (retriable when the cause is, as a lost
        ZooKeeper session is): the reader learns why, not just "nothing"."""
        await self._wait_for(seq, wait_s, catch_up)
        if not self.covers(seq):
            return None
        index = bisect.bisect_left(self._seqs, seq)
        if index == len(self._records) and (self.gone or not self.status().following):
            failure = self._not_following()
            if failure is not None:
                raise failure
            # Not following yet, and nothing failed: still starting, so nothing new (a 500
            # once, for a request with wait_ms=0 that came as the read-ahead started).
        return self._records[index : index + max_records]

    def _lacks(self, seq: int) -> bool:
        return bisect.bisect_left(self._seqs, seq) == len(self._records)

    @property
    def catching_up(self) -> bool:
        """True while the cache's reader is still reading records that are written."""
        source = self._reading or self._opened
        return source is not None and not source.at_end

    async def _wait_for(self, seq: int, wait_s: float, catch_up: bool) -> None:
        """Waits up to `wait_s` for record `seq` while the cache lacks it, and up to
        CATCH_UP_S whatever `wait_s` while its reader is still reading records that are there
        (as a page from a reader of its own does: a client asking again with the same short
        wait must not be answered an empty page for ever while records exist). Not following
        too: a restart within the wait may still bring it. Without `catch_up` (a streamed
        tail, which asks again at once), `wait_s` alone."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        while self._lacks(seq) and not self.gone and self.covers(seq):
            catching_up = catch_up and self.catching_up
            left = (max(wait_s, CATCH_UP_S) if catching_up else wait_s) - (loop.time() - began)
            if left < 0.001:  # (not 0: a timeout of a few ulps would fire at once, for ever)
                return
            with contextlib.suppress(TimeoutError):  # while catching up, look again at the end
                async with asyncio.timeout(min(left, CATCH_UP_STEP_S) if catching_up else left):
                    await self.waiters.wait(seq)

    def _not_following(self) -> GlobelogError | None:
        """Why the read-ahead is not following: its newest failure (None when none came, as
        while it starts)."""
        failure = self._failure
        if isinstance(failure, GlobelogError):
            # the same error each time: a fresh traceback, so raising it again does not grow one
            return failure.with_traceback(None)
        if failure is None:
            return None
        status = self.status()
        return GlobelogError(
            f"the read-ahead of stream {self.stream!r} is {status.state.value} "
            f"(restarts {status.restarts}, last error: {status.last_error})"
        )

    async def close(self) -> None:
        self._closed = True
        self._drop(len(self._records))  # its bytes leave the proxy's budget
        self._notify()  # a long poll waiting here is answered by a reader of its own
        if self._follower is not None:
            await self._follower.stop()
        if self._opened is not None:
            await self._opened.close()
