"""One read-ahead per stream for every reader a read proxy serves.

A cache follows the stream with one LogReader from the first position asked of it and keeps
the newest records (bounded by count and bytes). A request from a sequence id inside the
cached range is served from memory, and waits (long poll) when it asks for the next record
not read yet; a request from before the cached range gets a reader of its own.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging

from core.errors import DataLossError, GlobelogError
from core.records import LogRecord
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient
from reader.log_reader import LogReader, ReaderConfig
from reader.positions import By, Position

log = logging.getLogger(__name__)
CACHE_RECORDS_MAX = 200_000
CACHE_BYTES_MAX = 64 * 1024 * 1024


class StreamCache:
    def __init__(
        self,
        streams: StreamMetaStore,
        ledgers: LedgerClient,
        stream: str,
        records_max: int = CACHE_RECORDS_MAX,
        bytes_max: int = CACHE_BYTES_MAX,
    ) -> None:
        self.stream = stream
        self._streams = streams
        self._ledgers = ledgers
        self._records: list[LogRecord] = []
        self._seqs: list[int] = []
        self._bytes = 0
        self._records_max = records_max
        self._bytes_max = bytes_max
        self._arrived = asyncio.Condition()
        self._reader: LogReader | None = None
        self._feeder: asyncio.Task[None] | None = None
        self._failure: GlobelogError | None = None
        self.start_seq: int | None = None  # where the cache's reader started
        self.gaps: list[DataLossError] = []  # lost ranges the cache's reader reported

    @property
    def started(self) -> bool:
        return self._feeder is not None

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
        """Begins following the stream from sequence id `seq` (once)."""
        if self._feeder is not None:
            return
        self.start_seq = seq
        self._reader = await LogReader.open(
            self._streams, self._ledgers, self.stream, Position(By.SEQ, seq), ReaderConfig()
        )
        self._feeder = asyncio.get_running_loop().create_task(self._feed(self._reader))

    async def _feed(self, reader: LogReader) -> None:
        try:
            while True:
                try:
                    record = await reader.read_next()
                except DataLossError as gap:
                    self.gaps.append(gap)
                    continue
                if record is None:
                    break
                self._append(record)
                async with self._arrived:
                    self._arrived.notify_all()
        except GlobelogError as err:
            log.warning("stream cache of %r stopped: %s", self.stream, err)
            self._failure = err
            async with self._arrived:
                self._arrived.notify_all()

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
        for the first when none is there yet. Needs `covers(seq)`."""
        index = bisect.bisect_left(self._seqs, seq)
        if index == len(self._records) and wait_s > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s), self._arrived:
                    await self._arrived.wait_for(
                        lambda: (
                            bisect.bisect_left(self._seqs, seq) < len(self._records)
                            or self._failure is not None
                        )
                    )
            index = bisect.bisect_left(self._seqs, seq)
        if self._failure is not None and index == len(self._records):
            raise self._failure
        return self._records[index : index + max_records]

    async def close(self) -> None:
        if self._feeder is not None:
            self._feeder.cancel()
            await asyncio.gather(self._feeder, return_exceptions=True)
        if self._reader is not None:
            await self._reader.close()
