"""A write proxy's idempotent writes for one owned stream: its producer table, rebuilt from
the stream on first use after the proxy took the stream over, and the writes in flight.

The table is rebuilt lazily, when the first idempotent write arrives, so a takeover (and the
writes that name no producer) never waits for the scan; idempotent writes wait for it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from core import runtime
from core.errors import (
    MetadataUnavailableError,
    OverCapacityError,
    ProducerSeqInFlightError,
    SessionExpiredError,
    TruncatedPositionError,
)
from global_meta.streams import StreamMetaStore, VersionedSegment
from ledger import LedgerClient
from reader.log_reader import LogReader, ReaderConfig
from reader.positions import By, Position
from region.idempotence.producers import SCAN_RECORDS, ProducerBudget, ProducerTable
from writer.events import Written

log = logging.getLogger(__name__)
REBUILD_TIMEOUT_S = 60.0
SLOW_REBUILD_S = 1.0  # a rebuild still going after this long says where it is
# Entries read at once by each reader of the rebuild's scan: the first idempotent write after
# a takeover waits for it. 1 000 one-record entries took 0.11-0.22 s from a local bookie in
# batches of 32 (the reader's default), 0.06-0.08 s in batches of 128.
REBUILD_READAHEAD_ENTRIES = 32
# Readers of a rebuild's scan at once, each a run of whole segments: one reader read a
# segment after the other, each a WAN round trip or more (2026-12-01: 27-1 115 records over
# up to a dozen segments, 0.03-1.08 s from us-west on the realistic WAN; with four readers,
# 0.05-0.44 s). At most 256 entries in flight (16 MiB of 64 KiB entries) a rebuild.
REBUILD_READERS = 8
# Readers of every rebuild of a proxy at once (a failover that brings it many streams): at
# most 2 048 entries in flight (128 MiB of 64 KiB entries).
REBUILD_READERS_PER_PROXY = 64

Key = tuple[int, int]  # (producer id, producer seq)


async def rebuild_table(
    streams: StreamMetaStore,
    ledgers: LedgerClient,
    stream: str,
    upto_seq: int,
    scan_records: int = SCAN_RECORDS,
    budget: ProducerBudget | None = None,
    owner_segment: int | None = None,
    readers: asyncio.Semaphore | None = None,
) -> ProducerTable:
    """The producer table of the stream's records before sequence id `upto_seq`, from its
    last `scan_records` records (or all of them, when fewer remain after truncation).
    `owner_segment`: the sequence of the segment the caller's writer started (the reads
    session is used once its view holds it); `readers`: shared by the caller's rebuilds,
    one held by each reader while it reads.

    The scan's segments are read by up to REBUILD_READERS readers at once, each a run of
    whole segments, through the reads session; the table takes their records in order."""
    table = ProducerTable(budget=budget)
    if upto_seq == 0 or runtime.broken(runtime.FORGET_PRODUCERS):
        return table
    began = runtime.monotonic()
    scan = _Scan(stream, max(0, upto_seq - scan_records), upto_seq, readers)

    def slow() -> None:
        log.warning(
            "the producer table of %s is still being rebuilt after %.1f s: %d records "
            "scanned of seq %d..%d, %s", stream, runtime.monotonic() - began, scan.scanned,
            scan.start_seq, upto_seq, scan.at,
        )  # fmt: skip

    watch = asyncio.get_running_loop().call_later(SLOW_REBUILD_S, slow)
    try:
        # Through the reads session only if its view holds the new owner's segment: then it
        # holds every completion before it (made before that segment's start, or in the same
        # multi-op), and a session's view never goes back. A view behind that would end the
        # scan early, and a producer's retry of a write it does not show be written again.
        async def view(
            through: StreamMetaStore,
        ) -> tuple[StreamMetaStore, list[VersionedSegment]]:
            return through, await through.segments(stream)

        reads, segments = await streams.read_unordered(view)
        fresh = owner_segment is not None and any(
            v.segment.sequence >= owner_segment for v in segments
        )
        if reads is not streams and not fresh:
            reads, segments = await view(streams)
        runs = _runs(segments, scan.start_seq, upto_seq, REBUILD_READERS)
        try:
            parts = await scan.read_runs(reads, ledgers, runs)
        except (MetadataUnavailableError, SessionExpiredError, TimeoutError) as err:
            if reads is streams:
                raise
            log.info(
                "rebuilding the producer table of %s through the main session: %r", stream, err
            )
            parts = await scan.read_runs(streams, ledgers, runs)
    finally:
        watch.cancel()
    for part in parts:
        for producer, producer_seq, written in part:
            table.record(producer, producer_seq, written)
    # an idempotent producer's first write after a takeover waits for this: say how long
    log.info(
        "rebuilt the producer table of %s from its last %d records (%d readers) in %.3f s",
        stream, scan.scanned, len(runs), runtime.monotonic() - began,
    )  # fmt: skip
    return table


def _runs(
    segments: Sequence[VersionedSegment], start_seq: int, upto_seq: int, most: int
) -> list[tuple[int, int]]:
    """[low, high) sequence-id ranges that split start_seq..upto_seq at segment starts, at
    most `most` of them, each a run of whole segments (the first from `start_seq`): a
    segment each when they are few enough (a segment costs its reader round trips however
    small it is), else runs of about as many records each."""
    starts = sorted(
        {
            v.segment.first_seq
            for v in segments
            if start_seq < v.segment.first_seq < upto_seq
            and (v.segment.is_in_progress or v.segment.record_count > 0)
        }
    )
    if not starts or most <= 1:
        return [(start_seq, upto_seq)]
    if len(starts) < most:
        return list(itertools.pairwise([start_seq, *starts, upto_seq]))
    share = (upto_seq - start_seq) / most
    cuts: list[int] = []
    for seq in starts:
        if len(cuts) == most - 1:
            break
        if seq - (cuts[-1] if cuts else start_seq) >= share:
            cuts.append(seq)
    bounds = [start_seq, *cuts, upto_seq]
    return list(itertools.pairwise(bounds))


class _Scan:
    """The records of one rebuild: what each reader found, and where the scan is (for the
    slow rebuild's warning)."""

    def __init__(
        self, stream: str, start_seq: int, upto_seq: int, readers: asyncio.Semaphore | None
    ) -> None:
        self.stream = stream
        self.readers = readers
        self.start_seq = start_seq
        self.upto_seq = upto_seq
        self.scanned = 0
        self.at = "opening the readers"

    async def read_runs(
        self, streams: StreamMetaStore, ledgers: LedgerClient, runs: list[tuple[int, int]]
    ) -> list[list[tuple[int, int, Written]]]:
        """Each run's records (`read`) read at once, in the order of `runs`; the first failure
        stops the others and is raised as it is."""
        self.scanned = 0
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self.read(streams, ledgers, *run)) for run in runs]
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None
        return [task.result() for task in tasks]

    async def read(
        self, streams: StreamMetaStore, ledgers: LedgerClient, low: int, high: int
    ) -> list[tuple[int, int, Written]]:
        if self.readers is None:
            return await self._read(streams, ledgers, low, high)
        async with self.readers:
            return await self._read(streams, ledgers, low, high)

    async def _read(
        self, streams: StreamMetaStore, ledgers: LedgerClient, low: int, high: int
    ) -> list[tuple[int, int, Written]]:
        """The (producer, producer seq, written) of the records of seq low..high-1 that name
        a producer. A start truncated away (the scan's, or a run's, truncated while the scan
        began) reads what is left of the run: from the stream's first active record, which
        is then past `low`."""
        config = ReaderConfig(
            follow=False, end_seq=high, readahead_entries=REBUILD_READAHEAD_ENTRIES
        )
        try:
            reader = await LogReader.open(
                streams, ledgers, self.stream, Position(By.SEQ, low), config
            )
        except TruncatedPositionError:
            reader = await LogReader.open(
                streams, ledgers, self.stream, Position.earliest(), config
            )
        found: list[tuple[int, int, Written]] = []
        async with reader:
            async for record in reader:
                if record.seq >= high:
                    break
                self.scanned += 1
                self.at = f"last read {record.dlsn}"
                if record.producer_id is not None and record.producer_seq is not None:
                    written = Written(record.dlsn, record.txid, record.seq)
                    found.append((record.producer_id, record.producer_seq, written))
        return found


class Idempotence:
    """One owned stream's producer table and its idempotent writes in flight."""

    def __init__(self, build: Callable[[], Coroutine[Any, Any, ProducerTable]]) -> None:
        self._build = build
        self._building: asyncio.Task[ProducerTable] | None = None
        self._inflight: set[Key] = set()

    async def table(self) -> ProducerTable:
        if self._building is None:
            self._building = asyncio.get_running_loop().create_task(self._build())
        try:
            async with asyncio.timeout(REBUILD_TIMEOUT_S):
                return await asyncio.shield(self._building)
        except TimeoutError:
            raise OverCapacityError(
                f"rebuilding the stream's producer table from its last records took over "
                f"{REBUILD_TIMEOUT_S:.0f} s; retry"
            ) from None
        except Exception:
            self._building = None  # the next idempotent write tries again
            raise

    async def write_once(
        self,
        keys: Sequence[Key],
        write: Callable[[list[int]], Awaitable[list[Written]]],
    ) -> tuple[list[Written], int]:
        """Writes the records of `keys` that have not landed yet (`write` gets their indices
        and returns where they landed); (where every one of them is, how many had landed)."""
        table = await self.table()
        landed = [table.lookup(producer, seq) for producer, seq in keys]
        todo = [i for i, where in enumerate(landed) if where is None]
        busy = [keys[i] for i in todo if keys[i] in self._inflight]
        if busy:
            producer, seq = busy[0]
            raise ProducerSeqInFlightError(
                f"producer {producer:#x} seq {seq} is being written by an earlier request; "
                "retry to get where it landed"
            )
        if todo:
            claimed = [keys[i] for i in todo]
            self._inflight.update(claimed)
            try:
                results = await write(todo)
                for index, where in zip(todo, results, strict=True):
                    table.record(*keys[index], where)
                    landed[index] = where
            finally:
                self._inflight.difference_update(claimed)
        return [where for where in landed if where is not None], len(keys) - len(todo)

    def close(self) -> None:
        building = self._building
        if building is None:
            return
        if not building.done():
            building.cancel()
        elif not building.cancelled() and building.exception() is None:
            building.result().close()  # its acks leave the proxy's budget
