"""Reads of a fixed part of a stream, cut into entry ranges that are read independently (by
different processes, in any order): the batch reads of globelog's Spark data source.

    ranges = await plan_ranges(streams, ledgers, "orders", Position(By.TXID, t0), None, 256)
    async for records in read_range(ledgers, ranges[3]):   # lists of LogRecord, in order
        ...

`plan_ranges` fixes the end when it runs (an in-progress segment up to its LAC then), so the
ranges describe the same records however late they are read. Each range is one segment's
entries first..last, delivering records from `start` (inclusive) to `end` (exclusive).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from core.dlsn import DLSN
from core.entry_format import as_log_record, decode_entry, log_records
from core.errors import DataLossError, InvalidRecordError, TruncatedPositionError
from core.records import NO_POSITION, LogRecord
from core.segments import SegmentMetadata, Truncation
from global_meta.streams import StreamMetaStore
from ledger import (
    EntryMissingError,
    EntryUnavailableError,
    LedgerClient,
    LedgerReader,
    NoSuchLedgerMetadataError,
)
from reader.archive import ArchivedRange, read_archived
from reader.log_reader import ARCHIVE_ENTRIES_PER_READ, resolve_position
from reader.positions import Position

ENTRIES_PER_READ = 64  # entries asked of the bookies at once
UNAVAILABLE_RETRIES_MAX = 8  # about 10 s of backoff before a range read gives up
BACKOFF_S_MIN, BACKOFF_S_MAX = 0.05, 2.0


@dataclass(frozen=True, slots=True)
class EntryRange:
    """Entries first_entry..last_entry of one segment; the records in [start, end)."""

    stream: str
    segment: int  # the segment's sequence number
    ledger_id: int
    first_entry: int
    last_entry: int  # inclusive
    first_seq: int  # of the segment's first record: sequence ids count on from it
    start: DLSN  # the first record delivered
    end: DLSN | None  # the first record not delivered; None: every record up to last_entry
    archive_uri: str | None = None  # set when the bookies no longer hold it (tiering)

    @property
    def entries(self) -> int:
        return self.last_entry - self.first_entry + 1


async def plan_ranges(
    streams: StreamMetaStore,
    ledgers: LedgerClient,
    stream: str,
    start: Position,
    end: Position | None,
    entries_per_range: int,
) -> list[EntryRange]:
    """The ranges holding the stream's records from `start` up to `end` (exclusive; None:
    the last record acknowledged now), in stream order. An empty list when nothing is there.

    Raises StreamNotFoundError, or TruncatedPositionError for a start before the first record
    still readable (it names that record).
    """
    if entries_per_range < 1:
        raise InvalidRecordError(f"entries per range is {entries_per_range}; expected >= 1")
    await streams.require(stream)
    begin = await resolve_position(streams, ledgers, stream, start)
    stop: DLSN | None = None
    if end is not None:
        try:
            stop = await resolve_position(streams, ledgers, stream, end)
        except TruncatedPositionError:
            return []  # the end lies before every readable record
        if stop <= begin:
            return []
    ranges: list[EntryRange] = []
    for versioned in await streams.segments(stream):
        segment = versioned.segment
        if segment.sequence < begin.segment or segment.truncation is Truncation.TRUNCATED:
            continue
        if stop is not None and segment.sequence > stop.segment:
            break
        last = await last_readable_entry(ledgers, segment)
        first = begin.entry if segment.sequence == begin.segment else 0
        if segment.min_active is not None:
            first = max(first, segment.min_active.entry)
        if stop is not None and segment.sequence == stop.segment:
            last = min(last, stop.entry if stop.slot > 0 else stop.entry - 1)
        for low in range(first, last + 1, entries_per_range):
            high = min(last, low + entries_per_range - 1)
            start_at = max(begin, segment.min_active or begin)
            ranges.append(segment_range(stream, segment, low, high, start_at, stop))
    return ranges


def split_range(part: EntryRange, entries: int) -> tuple[EntryRange, EntryRange | None]:
    """The range's first `entries` entries (at least one), and the rest (None: nothing left).
    Both deliver the records of [part.start, part.end) that they hold."""
    if entries >= part.entries:
        return part, None
    cut = part.first_entry + max(1, entries)
    return replace(part, last_entry=cut - 1), replace(part, first_entry=cut)


def segment_range(
    stream: str, segment: SegmentMetadata, first: int, last: int, start: DLSN, end: DLSN | None
) -> EntryRange:
    """Entries first..last of `segment`, delivering the records in [start, end)."""
    archive = segment.archive.uri if segment.archived_only and segment.archive else None
    return EntryRange(
        stream, segment.sequence, segment.ledger_id, first, last, segment.first_seq, start, end,
        archive,
    )  # fmt: skip


async def last_readable_entry(ledgers: LedgerClient, segment: SegmentMetadata) -> int:
    """The last entry holding user records (completed), or the LAC now (in progress)."""
    if not segment.is_in_progress:
        return -1 if segment.last_dlsn is None else segment.last_dlsn.entry
    reader = await ledgers.open(segment.ledger_id)
    return reader.lac if reader.is_closed else await reader.read_lac()


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class RangeDecoder(Protocol[T_co]):
    """Turns a range's entries (or, once retention deleted its ledger, its archive) into
    batches of some kind: LogRecord lists here, Arrow record batches in the data source."""

    def from_entries(self, part: EntryRange, bodies: list[tuple[int, bytes]]) -> T_co | None:
        """The records in [part.start, part.end) of these entries (id, body); None: none."""
        ...

    def from_archive(self, part: EntryRange, archived: ArchivedRange) -> T_co | None:
        """The same from an archived segment's copy (blocking: run in a thread)."""
        ...


class LogRecordDecoder:
    """Batches as lists of LogRecord (the library's)."""

    def from_entries(
        self, part: EntryRange, bodies: list[tuple[int, bytes]]
    ) -> list[LogRecord] | None:
        batch: list[LogRecord] = []
        start, end = part.start, part.end
        first_checked = start.entry if start.segment == part.segment else -1
        last_checked = end.entry if end is not None and end.segment == part.segment else 1 << 62
        for entry_id, body in bodies:
            where = f"stream {part.stream!r} segment {part.segment} entry {entry_id}"
            decoded = decode_entry(body, where)
            # Only the entries holding the range's start or end need a DLSN comparison.
            at_start = entry_id <= first_checked
            at_end = entry_id >= last_checked
            for dlsn, record, seq in log_records(decoded, part.segment, entry_id, part.first_seq):
                if (record.flags and record.flags & NO_POSITION) or (at_start and dlsn < start):
                    continue
                if at_end and end is not None and dlsn >= end:
                    break
                batch.append(as_log_record(record, dlsn, seq, decoded))
        return batch or None

    def from_archive(self, part: EntryRange, archived: ArchivedRange) -> list[LogRecord] | None:
        records = [
            r
            for r in read_archived(archived)
            if r.dlsn >= part.start and (part.end is None or r.dlsn < part.end)
        ]
        return records or None


async def read_range(
    ledgers: LedgerClient,
    part: EntryRange,
    entries_per_read: int = ENTRIES_PER_READ,
    streams: StreamMetaStore | None = None,
) -> AsyncIterator[list[LogRecord]]:
    """The range's user records in stream order, a list per batch of entries read."""
    async for batch in read_range_as(ledgers, part, LogRecordDecoder(), entries_per_read, streams):
        yield batch


async def read_range_as(
    ledgers: LedgerClient,
    part: EntryRange,
    decoder: RangeDecoder[T],
    entries_per_read: int = ENTRIES_PER_READ,
    streams: StreamMetaStore | None = None,
) -> AsyncIterator[T]:
    """The range's user records in stream order, as the decoder's batches, one per read.

    An entry no bookie has raises DataLossError naming the lost range: a batch read of a
    fixed range is not complete without it. Given `streams`, a ledger that retention deleted
    after the range was planned is first looked for in the segment's archive.
    """
    if part.archive_uri is not None:
        async for batch in _read_archived_range(part, decoder):
            yield batch
        return
    next_entry = part.first_entry
    try:
        async for bodies in _bodies(ledgers, part, entries_per_read):
            decoded = decoder.from_entries(part, bodies)
            next_entry = bodies[-1][0] + 1
            if decoded is not None:
                yield decoded
    except (DataLossError, NoSuchLedgerMetadataError):
        uri = None if streams is None else await _archive_of(streams, part)
        if uri is None:
            raise
        rest = replace(part, first_entry=next_entry, archive_uri=uri)
        async for batch in _read_archived_range(rest, decoder):
            yield batch


async def _archive_of(streams: StreamMetaStore, part: EntryRange) -> str | None:
    """The segment's archive, when its ledger was deleted after being archived."""
    versioned = await streams.segment(part.stream, part.segment)
    segment = None if versioned is None else versioned.segment
    if segment is None or not segment.archived_only or segment.archive is None:
        return None
    return segment.archive.uri


async def _read_archived_range(part: EntryRange, decoder: RangeDecoder[T]) -> AsyncIterator[T]:
    assert part.archive_uri is not None, part
    step = ARCHIVE_ENTRIES_PER_READ
    for low in range(part.first_entry, part.last_entry + 1, step):
        high = min(part.last_entry, low + step - 1)
        archived = ArchivedRange(part.stream, part.segment, part.archive_uri, low, high)
        batch = await asyncio.to_thread(decoder.from_archive, part, archived)
        if batch is not None:
            yield batch


async def _bodies(
    ledgers: LedgerClient, part: EntryRange, entries_per_read: int
) -> AsyncIterator[list[tuple[int, bytes]]]:
    """The range's entries (id, body), a list per read."""
    first, last = part.first_entry, part.last_entry
    if first > last:
        return
    reader = await ledgers.open(part.ledger_id)
    if not reader.is_closed and reader.lac < last:
        # A range of a segment still being written was planned up to the LAC then; this
        # handle is new and has not learnt it yet.
        await reader.read_lac()
    where = (part.stream, part.segment, part.ledger_id)
    for low in range(first, last + 1, entries_per_read):
        high = min(last, low + entries_per_read - 1)
        yield list(enumerate(await _read_entries(reader, where, low, high), start=low))


async def _read_entries(
    reader: LedgerReader, where: tuple[str, int, int], low: int, high: int
) -> list[bytes]:
    stream, segment, ledger_id = where
    for attempt in range(UNAVAILABLE_RETRIES_MAX + 1):
        try:
            return list(await reader.read_entries(low, high))
        except EntryMissingError as err:
            first, last = DLSN(segment, low, 0), DLSN(segment, high, 0)
            raise DataLossError(
                f"stream {stream!r} segment {segment} (ledger {ledger_id}) entries "
                f"{low}..{high}: no bookie has them ({err})",
                str(first),
                str(last),
            ) from err
        except EntryUnavailableError:
            if attempt == UNAVAILABLE_RETRIES_MAX:
                raise
            await asyncio.sleep(min(BACKOFF_S_MAX, BACKOFF_S_MIN * 2**attempt))
    raise AssertionError("unreachable")
