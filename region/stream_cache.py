"""One read-ahead per stream for every reader a read proxy serves.

A cache follows the stream with one LogReader from the first position asked of it and keeps
the newest records (bounded by count and bytes). A request from a sequence id inside the
cached range is served from memory, and waits (long poll) when it asks for the next record
not read yet; a request from before the cached range gets a reader of its own.

The follow loop runs under a `Follower`: when its reader fails (no ZooKeeper session while
the region is cut off, bookies away) it is restarted with backoff from the record after the
newest cached one, so the cache goes on where it stopped once the cause is gone. While it is
not following, a request that finds nothing new gets the last failure, and the proxy's
health names the stream.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from core.errors import DataLossError, GlobelogError, StreamNotFoundError
from core.records import LogRecord
from global_meta.followers import Follower, FollowerState, FollowerStatus, RestartBackoff
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient
from reader.log_reader import LogReader, ReaderConfig
from reader.positions import By, Position

log = logging.getLogger(__name__)
CACHE_RECORDS_MAX = 200_000
CACHE_BYTES_MAX = 64 * 1024 * 1024
GAPS_MAX = 1000  # lost ranges remembered per cache (the oldest go first)


class RecordSource(Protocol):
    """What the cache follows a stream with (a LogReader)."""

    async def read_next(self, timeout_s: float | None = None) -> LogRecord | None: ...

    async def close(self) -> None: ...


SourceOpener = Callable[[int], Awaitable[RecordSource]]


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
    ) -> None:
        self.stream = stream
        self._streams = streams
        self._ledgers = ledgers
        self._open_source = open_source or self._open_reader
        self._on_failed = on_failed
        self._restart_backoff = restart_backoff
        self._records: list[LogRecord] = []
        self._seqs: list[int] = []
        self._bytes = 0
        self._records_max = records_max
        self._bytes_max = bytes_max
        self._arrived = asyncio.Event()  # replaced after each set: one generation per change
        self._opened: RecordSource | None = None  # the first source, opened by start()
        self._follower: Follower | None = None
        self._failure: BaseException | None = None  # the newest failure of the follow loop
        self.start_seq: int | None = None  # where the cache's reader started
        self.gaps: list[DataLossError] = []  # lost ranges the cache's reader reported

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
        if self.start_seq is None or seq < self.start_seq:
            return False
        return not self._seqs or seq >= self._seqs[0]

    @property
    def next_seq(self) -> int | None:
        """The sequence id after the newest cached record."""
        if self._seqs:
            return self._seqs[-1] + 1
        return self.start_seq

    async def start(self, seq: int) -> None:
        """Begins following the stream from sequence id `seq` (once). Opening the first
        reader happens here, so its errors (an unknown stream) reach the first request."""
        if self._follower is not None:
            return
        self.start_seq = seq
        self._opened = await self._open_source(seq)
        self._follower = Follower(
            f"stream cache of {self.stream!r}",
            self._follow,
            backoff=self._restart_backoff,
            on_failed=self._on_failed,
        )
        self._follower.start()

    async def _open_reader(self, seq: int) -> RecordSource:
        return await LogReader.open(
            self._streams, self._ledgers, self.stream, Position(By.SEQ, seq), ReaderConfig()
        )

    async def _follow(self, following: Callable[[], None]) -> None:
        """Reads the stream into the cache; a restart goes on after the newest record."""
        source, self._opened = self._opened, None
        try:
            if source is None:
                next_seq = self.next_seq
                assert next_seq is not None, "a cache follows only once started"
                source = await self._open_source(next_seq)
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
                self._notify()
        except StreamNotFoundError as err:  # deleted: nothing to restart for
            self._failure = err
        except Exception as err:
            self._failure = err
            raise
        finally:
            self._notify()  # waiters see the failure (or the end) at once
            if source is not None:
                await source.close()

    def _notify(self) -> None:
        self._arrived.set()
        self._arrived = asyncio.Event()

    def _gap(self, gap: DataLossError) -> None:
        self.gaps.append(gap)
        del self.gaps[:-GAPS_MAX]

    def _append(self, record: LogRecord) -> None:
        self._records.append(record)
        self._seqs.append(record.seq)
        self._bytes += len(record.payload)
        over = len(self._records) - self._records_max
        while over > 0 or self._bytes > self._bytes_max:
            drop = max(over, len(self._records) // 8, 1)
            self._bytes -= sum(len(r.payload) for r in self._records[:drop])
            del self._records[:drop]
            del self._seqs[:drop]
            over = len(self._records) - self._records_max

    async def read(self, seq: int, max_records: int, wait_s: float) -> list[LogRecord]:
        """Records from sequence id `seq` on (at most `max_records`); waits up to `wait_s`
        for the first when none is there yet. Needs `covers(seq)`. With nothing to give
        while the cache is not following, raises its newest failure (retriable when the
        cause is, as a lost ZooKeeper session is): the reader learns why, not just "nothing"."""
        if bisect.bisect_left(self._seqs, seq) == len(self._records) and wait_s > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    # Not following, too: a restart within the wait may still bring it.
                    while bisect.bisect_left(self._seqs, seq) == len(self._records):
                        if self.gone:
                            break
                        await self._arrived.wait()
        index = bisect.bisect_left(self._seqs, seq)
        if index == len(self._records) and (self.gone or not self.status().following):
            raise self._not_following()
        return self._records[index : index + max_records]

    def _not_following(self) -> GlobelogError:
        failure = self._failure
        if isinstance(failure, GlobelogError):
            # the same error each time: a fresh traceback, so raising it again does not grow one
            return failure.with_traceback(None)
        status = self.status()
        return GlobelogError(
            f"the read-ahead of stream {self.stream!r} is {status.state.value} "
            f"(restarts {status.restarts}, last error: {status.last_error})"
        )

    async def close(self) -> None:
        if self._follower is not None:
            await self._follower.stop()
        if self._opened is not None:
            await self._opened.close()
