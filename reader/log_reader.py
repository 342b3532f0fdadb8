"""LogReader: delivers a stream's records once, in order, across segments (library mode).

    reader = await LogReader.open(streams, ledgers, "orders", Position(By.TXID, 1000))
    async for record in reader:
        ...

A read-ahead task reads entries up to each ledger's LAC (batches while catching up, the
bookies' long poll while tailing), decodes them and queues the user records (bounded), and
follows the segment list through a ZooKeeper watch: a completed segment is read to its last
entry, then the next one is opened. Control records are never delivered. Data no bookie can
serve (a lost ledger or entry) is reported as DataLossError with its range, once; reading
then goes on after it. A stream sealed with an end-of-stream record ends the iteration, as
does reaching the end when the reader does not follow. Anything else that stops the
read-ahead or its watch (ZooKeeper away, bookies away past their retries, a bug) is raised
to the caller as it is, once, and ends the reader: a bug is never passed off as an end.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass

from core import runtime
from core.dlsn import DLSN
from core.entry_format import as_log_record, decode_entry, log_records
from core.errors import (
    DataLossError,
    GlobelogError,
    ReadTimeoutError,
    TruncatedPositionError,
)
from core.records import LogRecord
from core.segments import SegmentMetadata, Truncation
from global_meta.streams import StreamMetaStore
from ledger import (
    EntryMissingError,
    EntryUnavailableError,
    LedgerClient,
    LedgerReader,
    NoSuchLedgerMetadataError,
)
from reader.archive import ArchivedRange, find_archived, read_archived_async
from reader.entry_search import search_segment
from reader.positions import (
    By,
    Position,
    check_not_truncated,
    check_seq_not_truncated,
    segment_for,
    start_in_segment,
)

log = logging.getLogger(__name__)

UNAVAILABLE_RETRIES_MAX = 40  # about a minute of backoff before the reader gives up
BACKOFF_S_MIN, BACKOFF_S_MAX = 0.05, 2.0
# A reader waiting for the next segment learns of it from the segment watch; it also checks
# the stream's allocated segment sequence this often, so a change the watch did not report
# delays it by that much at most instead of stalling it.
SEGMENT_CHECK_S = 5.0
IDLE_AFTER_S = 1.0  # a tailed segment with no entry for this long polls with the idle timeout
CATCH_UP_STEP_S = 0.1  # how often a page's first read looks whether the reader reached the end


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    follow: bool = True  # False: stop at the end of the stream as it is when reached
    readahead_entries: int = 32  # entries read per batch while catching up
    readahead_records_max: int = 10_000  # records decoded ahead of the caller
    # A tailing reader's long poll asks one bookie; a bookie once did not wake a long poll
    # when its LAC moved (seen on BookKeeper 4.17 with the writer's local bookies: polls
    # answered only at their timeout while entries kept arriving), so while entries come,
    # polls are kept short: that bounds the delay such a poll adds. After IDLE_AFTER_S without
    # an entry they last longer: an idle stream's reader then costs a poll every 2 s, not
    # five a second. (2026-11-29: polls of 5 s woke for every entry, sporadic or at
    # 1 000/s, with delivery p99 the same as with 200 ms polls; docs/benchmarks.md.)
    long_poll_timeout_ms: int = 200
    long_poll_idle_timeout_ms: int = 2000
    open_timeout_s: float = 30.0
    # read_next_written waits this long for a record while records exist (docs/http-api.md)
    catch_up_s: float = 3.0
    # A reader that does not follow ends before the first segment that starts at or past this
    # sequence id, without opening its ledger (a producer table's rebuild reads up to the
    # new owner's own segment, which an open would sync across the WAN for nothing).
    end_seq: int | None = None


ARCHIVE_ENTRIES_PER_READ = 256  # entries of an archived segment read at once


class _MovedToArchive(Exception):  # noqa: N818 (a signal inside the reader, not an error)
    """The segment being read was archived and its ledger deleted: read on from the archive."""

    def __init__(self, segment: SegmentMetadata, position: DLSN) -> None:
        super().__init__(segment.sequence)
        self.segment = segment
        self.position = position


class _Outcome(enum.Enum):
    NEXT = "next"  # go on with the next segment
    SEALED = "sealed"  # an end-of-stream record: nothing follows
    END = "end"  # a reader that does not follow reached the end


@dataclass(frozen=True, slots=True)
class _End:
    sealed: bool  # True: an end-of-stream record; False: the end of a non-following read


class LogReader:
    """Reads one stream from a position. `async with` it (or `await close()`)."""

    def __init__(
        self,
        streams: StreamMetaStore,
        ledgers: LedgerClient,
        stream: str,
        start: Position,
        config: ReaderConfig,
    ) -> None:
        self.stream = stream
        self.config = config
        self._streams = streams
        self._ledgers = ledgers
        self._start = start
        # records, lost ranges, the end, or what stopped the read-ahead (raised as it is)
        self._queue: asyncio.Queue[LogRecord | _End | Exception] = asyncio.Queue(
            config.readahead_records_max
        )
        self._changed = asyncio.Event()  # the segment list changed
        self._segment_read_at_s = float("-inf")  # when the tailed segment was last read
        self._entry_came_at_s = runtime.monotonic()  # the last time a long poll brought one
        self._read_ahead: asyncio.Task[None] | None = None
        self._end: _End | None = None
        self.position: DLSN | None = None  # where reading starts (resolved by open)
        # True while the read-ahead has read all that is written and waits for more (a long
        # poll past the LAC, a new segment), or reached the end: nothing more comes at once.
        self.at_end = False

    @classmethod
    async def open(
        cls,
        streams: StreamMetaStore,
        ledgers: LedgerClient,
        stream: str,
        start: Position | None = None,
        config: ReaderConfig | None = None,
    ) -> LogReader:
        """Resolves `start` (default: the first record) and starts reading ahead.

        Raises StreamNotFoundError, or TruncatedPositionError for a position before the
        first active record (it names that record's DLSN).
        """
        reader = cls(
            streams, ledgers, stream, start or Position.earliest(), config or ReaderConfig()
        )
        async with asyncio.timeout(reader.config.open_timeout_s):
            await streams.require(stream)
            reader.position = await reader._resolve()
        reader._read_ahead = asyncio.get_running_loop().create_task(
            reader._follow(reader.position), name=f"reader of {stream!r}"
        )
        return reader

    # ----------------------------------------------------------------------------- API

    async def read_next(self, timeout_s: float | None = None) -> LogRecord | None:
        """The next record; None at the end (see `sealed`). Raises DataLossError once for
        each lost range, ReadTimeoutError when nothing comes within `timeout_s`."""
        if self._end is not None:
            return None
        try:
            async with asyncio.timeout(timeout_s):
                item = await self._queue.get()
        except TimeoutError:
            raise ReadTimeoutError(
                f"stream {self.stream!r}: no record within {timeout_s} s"
            ) from None
        if isinstance(item, LogRecord):
            return item
        if isinstance(item, _End):
            self._end = item
            return None
        if isinstance(item, DataLossError):
            raise item
        self._end = _End(sealed=False)
        raise item  # what stopped the read-ahead, as it is

    async def read_next_written(self, wait_s: float) -> LogRecord | None:
        """The next record for a page of a long poll: waits up to `wait_s` for it once the
        reader has read all that is written, and up to the config's `catch_up_s` (or `wait_s`,
        the longer) while it is still reading records that are there. A reader opened far from the end, on
        slow or distant bookies, must not answer "nothing yet" while records exist: a client
        asking again with the same short wait would be answered so for ever. None at the end;
        ReadTimeoutError when nothing came."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        while True:
            waited = loop.time() - began
            left = (wait_s if self.at_end else max(wait_s, self.config.catch_up_s)) - waited
            if left < 0.001:  # (not 0: a timeout of a few ulps would fire at once, for ever)
                if self.buffered:  # queued as the wait ran out
                    return await self.read_next()
                raise ReadTimeoutError(f"stream {self.stream!r}: no record within {waited:.3f} s")
            try:  # while catching up, look again at whether the reader reached the end
                return await self.read_next(left if self.at_end else min(left, CATCH_UP_STEP_S))
            except ReadTimeoutError:
                continue

    @property
    def buffered(self) -> int:
        """Records (and reports) read ahead and not yet taken."""
        return self._queue.qsize()

    @property
    def sealed(self) -> bool:
        """True once the reader reached an end-of-stream record."""
        return self._end is not None and self._end.sealed

    def __aiter__(self) -> LogReader:
        return self

    async def __anext__(self) -> LogRecord:
        record = await self.read_next()
        if record is None:
            raise StopAsyncIteration
        return record

    async def close(self) -> None:
        task = self._read_ahead
        if task is None:
            return
        task.cancel()
        # It hands every failure to the caller through the queue; anything else is a bug of
        # its own and is raised here rather than lost.
        await asyncio.wait({task})
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error

    async def __aenter__(self) -> LogReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---------------------------------------------------------------------- positioning

    async def _segments(self) -> list[SegmentMetadata]:
        return [v.segment for v in await self._streams.segments(self.stream)]

    async def _resolve(self) -> DLSN:
        return await resolve_position(self._streams, self._ledgers, self.stream, self._start)

    # ------------------------------------------------------------------------ reading

    async def _follow(self, start: DLSN) -> None:
        """The segment watch and the read-ahead, owned together: when either fails, the
        other is stopped and the failure becomes the item the caller receives (I8). A
        watch that died alone would leave a tailing reader waiting for ever for a segment
        list that never changes. (Not an asyncio.TaskGroup: on Python 3.11 a child's error
        there wins over close()'s cancellation, and the error's hand-over could then wait
        for ever on a full queue.)"""
        run = asyncio.get_running_loop().create_task(self._run(start))
        watch = asyncio.get_running_loop().create_task(self._watch())
        try:
            await asyncio.wait({run, watch}, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in (run, watch):
                task.cancel()
            await asyncio.wait({run, watch})
        failures = [
            error
            for task in (run, watch)
            if not task.cancelled() and (error := task.exception()) is not None
        ]
        if failures:
            first, *others = failures
            for other in others:
                log.warning("reader of %r also failed: %r", self.stream, other)
            if not isinstance(first, GlobelogError):
                log.error("reader of %r failed", self.stream, exc_info=first)
            await self._queue.put(first if isinstance(first, Exception) else RuntimeError(first))

    async def _watch(self) -> None:
        async for _ in self._streams.watch_segments(self.stream):
            self._changed.set()

    async def _run(self, start: DLSN) -> None:
        """The read-ahead loop: queues the records, then the end (failures: see _follow)."""
        position = start
        while True:
            segment = await self._next_segment(position.segment)
            if segment is None:
                self.at_end = True
                await self._queue.put(_End(sealed=False))
                return
            end_seq = self.config.end_seq
            if end_seq is not None and not self.config.follow and segment.first_seq >= end_seq:
                self.at_end = True
                await self._queue.put(_End(sealed=False))
                return
            self.at_end = False  # a segment to read: the end is known again once it is read
            if segment.sequence > position.segment:
                position = segment.first_dlsn
            if segment.truncation is Truncation.TRUNCATED:
                raise TruncatedPositionError(
                    f"stream {self.stream!r}: segment {segment.sequence} was truncated "
                    f"while the reader was at {position}"
                )
            outcome = await self._read_segment(segment, position)
            if outcome is not _Outcome.NEXT:
                self.at_end = True
                await self._queue.put(_End(sealed=outcome is _Outcome.SEALED))
                return
            position = position.next_segment()

    async def _next_segment(self, sequence: int) -> SegmentMetadata | None:
        """Segment `sequence`, or the first one after it; waits for it when following."""
        while True:
            self._changed.clear()
            segments = await self._segments()
            later = [s for s in segments if s.sequence >= sequence]
            if later:
                return later[0]
            if not self.config.follow:
                return None
            await self._segment_started(sequence)

    async def _segment_started(self, sequence: int) -> None:
        """Returns when the segment list changed, or a segment `sequence` or later was
        started (checked every SEGMENT_CHECK_S: the bound on a change the watch missed)."""
        self.at_end = True
        while True:
            try:
                async with asyncio.timeout(SEGMENT_CHECK_S):
                    await self._changed.wait()
                return
            except TimeoutError:
                pass
            if (await self._streams.counters(self.stream)).max_sequence >= sequence:
                return

    async def _read_segment(self, segment: SegmentMetadata, start: DLSN) -> _Outcome:
        """Delivers the segment's records from `start`; what comes after them."""
        if segment.archived_only:
            return await self._read_archive(segment, start)
        try:
            return await self._read_ledger(segment, start)
        except _MovedToArchive as moved:  # retention deleted the ledger while we read it
            return await self._read_archive(moved.segment, moved.position)

    async def _read_archive(self, segment: SegmentMetadata, start: DLSN) -> _Outcome:
        """Delivers an archived segment's records from `start` (its ledger is deleted)."""
        last = -1 if segment.last_dlsn is None else segment.last_dlsn.entry
        step = max(ARCHIVE_ENTRIES_PER_READ, self.config.readahead_entries)
        for low in range(start.entry, last + 1, step):
            part = ArchivedRange.of(self.stream, segment, low, min(last, low + step - 1))
            for record in await read_archived_async(part):
                if record.dlsn >= start:
                    await self._queue.put(record)
        return _Outcome.SEALED if segment.end_of_stream else _Outcome.NEXT

    async def _archived_since(self, segment: SegmentMetadata, position: DLSN) -> None:
        """Raises _MovedToArchive when the segment's ledger went to its archive (reading
        goes on there from `position`)."""
        refreshed = await self._refresh(segment)
        if refreshed is not None and refreshed.archived_only:
            raise _MovedToArchive(refreshed, position)

    async def _read_ledger(self, segment: SegmentMetadata, start: DLSN) -> _Outcome:
        try:
            # A completed segment's ledger was closed before (or with) the completion this
            # reader saw through the same ZooKeeper server: its metadata needs no sync with
            # the leader (a WAN round trip per segment; a producer table's rebuild over a
            # dozen segments spent seconds on them). Read through the session the stream's
            # metadata is read through: the reads session, for a reader given one.
            reader = await self._ledgers.open(
                segment.ledger_id, synced=segment.is_in_progress, read_through=self._streams.store
            )
        except NoSuchLedgerMetadataError:
            await self._archived_since(segment, start)
            await self._lost(segment, start, None, "its ledger is gone")
            return _Outcome.NEXT
        entry = start.entry
        first_slot = start.slot
        if not reader.is_closed and reader.lac < entry:
            # Where the bookies stand, before any wait: a reader that has not asked does not
            # know it is behind, and would take itself to be at the end (`at_end`).
            try:
                await reader.read_lac()
            except EntryUnavailableError as err:  # the tail's long polls ask again
                log.debug("stream %r: no LAC before reading: %s", self.stream, err)
        lac_asked = False  # a reader that does not follow asks for the LAC once, at its end
        moved = False  # the last long poll brought a newer LAC: the segment is still written
        while True:
            last = reader.lac
            if entry <= last:
                batch_last = min(last, entry + self.config.readahead_entries - 1)
                if await self._deliver(reader, segment, entry, batch_last, first_slot):
                    return _Outcome.SEALED
                entry, first_slot = batch_last + 1, 0
                continue
            if reader.is_closed:
                return _Outcome.NEXT
            if self._keep_tailing(moved):
                # Tailing a segment that is being written: its metadata only changes when it
                # completes, which its ledger's close or a new segment shows.
                moved, polled = await self._tail(reader)
                if polled is not None and polled[0] == entry:  # the long poll brought it
                    if await self._queue_records(segment, entry, [polled[1]], first_slot):
                        return _Outcome.SEALED
                    entry, first_slot = entry + 1, 0
                continue
            refreshed = await self._refresh(segment)
            if refreshed is None:
                await self._lost(segment, DLSN(segment.sequence, entry, 0), None, "it was deleted")
                return _Outcome.NEXT
            if not refreshed.is_in_progress:
                segment = refreshed
                reader = await self._ledgers.open(  # as above
                    segment.ledger_id, synced=False, read_through=self._streams.store
                )
                continue
            if not self.config.follow:
                if lac_asked:
                    return _Outcome.END
                await reader.read_lac()
                lac_asked = True
                continue
            moved, _ = await self._tail(reader)

    def _keep_tailing(self, moved: bool) -> bool:
        """Whether a tailing reader polls again without reading its segment's metadata: while
        the last poll brought entries, or until SEGMENT_CHECK_S after that metadata was last
        read. The segment's completion comes with its ledger's close (which the ledger reader
        sees) or with a new segment (the watch); a ZooKeeper read after every poll that timed
        out cost an idle stream's reader five a second for as long as it followed."""
        if self._changed.is_set() or not self.config.follow:
            return False
        return moved or runtime.monotonic() - self._segment_read_at_s < SEGMENT_CHECK_S

    async def _tail(self, reader: LedgerReader) -> tuple[bool, tuple[int, bytes] | None]:
        """Waits for the entry after the LAC (long poll) or a change of the segment list;
        whether the LAC moved, and the entry the poll brought with it, if any."""
        self.at_end = True
        lac = reader.lac
        now_s = runtime.monotonic()
        idle = now_s - self._entry_came_at_s >= IDLE_AFTER_S
        config = self.config
        poll_ms = config.long_poll_idle_timeout_ms if idle else config.long_poll_timeout_ms
        poll = asyncio.ensure_future(reader.wait_for_entry(poll_ms))
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({poll, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (poll, changed):
                task.cancel()
            await asyncio.gather(poll, changed, return_exceptions=True)
        if poll.done() and not poll.cancelled() and (err := poll.exception()) is not None:
            if not isinstance(err, EntryUnavailableError):
                raise err
            await asyncio.sleep(BACKOFF_S_MIN)
        polled = (
            poll.result() if poll.done() and not poll.cancelled() and not poll.exception() else None
        )
        if reader.lac > lac:
            self._entry_came_at_s = runtime.monotonic()
        return reader.lac > lac, polled

    async def _refresh(self, segment: SegmentMetadata) -> SegmentMetadata | None:
        self._changed.clear()
        self._segment_read_at_s = runtime.monotonic()
        versioned = await self._streams.segment(self.stream, segment.sequence)
        return None if versioned is None else versioned.segment

    async def _deliver(
        self, reader: LedgerReader, segment: SegmentMetadata, first: int, last: int, slot: int
    ) -> bool:
        """Reads entries first..last and queues their user records; True at end of stream."""
        self.at_end = False
        bodies = await self._read_entries(reader, segment, first, last, slot)
        return await self._queue_records(segment, first, bodies, slot)

    async def _queue_records(
        self, segment: SegmentMetadata, first: int, bodies: list[bytes | None], slot: int
    ) -> bool:
        """Queues the user records of entries first.. (their bodies); True at end of stream."""
        for entry_id, body in enumerate(bodies, start=first):
            if body is None:
                continue
            where = f"stream {self.stream!r} segment {segment.sequence} entry {entry_id}"
            decoded = decode_entry(body, where)
            for dlsn, record, seq in log_records(
                decoded, segment.sequence, entry_id, segment.first_seq
            ):
                if entry_id == first and dlsn.slot < slot:
                    continue
                if record.is_end_of_stream:
                    return True
                if record.is_control:
                    continue
                await self._queue.put(as_log_record(record, dlsn, seq, decoded))
        return False

    async def _read_entries(
        self, reader: LedgerReader, segment: SegmentMetadata, first: int, last: int, slot: int
    ) -> list[bytes | None]:
        """The entries' bodies; None for each one no bookie has (reported as a lost range)."""
        for attempt in range(UNAVAILABLE_RETRIES_MAX + 1):
            try:
                return list(await reader.read_entries(first, last))
            except EntryMissingError:
                await self._archived_since(segment, DLSN(segment.sequence, first, slot))
                break
            except EntryUnavailableError:
                if attempt == UNAVAILABLE_RETRIES_MAX:
                    raise
                await asyncio.sleep(min(BACKOFF_S_MAX, BACKOFF_S_MIN * 2**attempt))
        bodies: list[bytes | None] = []
        missing: list[int] = []
        for entry_id in range(first, last + 1):
            try:
                bodies.append(await reader.read_entry(entry_id))
            except EntryMissingError:
                bodies.append(None)
                missing.append(entry_id)
        if missing:
            where = DLSN(segment.sequence, missing[0], 0)
            await self._lost(
                segment, where, DLSN(segment.sequence, missing[-1], 0), "no bookie has it"
            )
        return bodies

    async def _lost(
        self, segment: SegmentMetadata, first: DLSN, last: DLSN | None, why: str
    ) -> None:
        last = last or segment.last_dlsn or DLSN(segment.sequence, first.entry, 0)
        records = (
            f" (records {segment.first_seq}..{segment.next_seq - 1})"
            if not segment.is_in_progress and segment.record_count and first == segment.first_dlsn
            else ""
        )
        await self._queue.put(
            DataLossError(
                f"stream {self.stream!r}: data lost from {first} to {last} in segment "
                f"{segment.sequence} (ledger {segment.ledger_id}): {why}{records}",
                str(first),
                str(last),
            )
        )


async def resolve_position(
    streams: StreamMetaStore, ledgers: LedgerClient, stream: str, position: Position
) -> DLSN:
    """The DLSN of the first record at or after `position` (the next segment's first one
    when it lies beyond every record). TruncatedPositionError for a position before the first
    active record (by DLSN and seq; txid and time positions there start at that record)."""
    # The counters first, then the list. A segment is started by one update of both, and a
    # session sees ZooKeeper's updates in order, so the list then holds every segment the
    # counters count. The other way round, a segment started between the two reads (or not
    # yet applied by this client's ZooKeeper server when the list was read, then applied) is
    # counted but not listed: an empty list would put the start after it, and its records
    # would be skipped.
    counters = await streams.counters(stream)
    segments = [v.segment for v in await streams.segments(stream)]
    if position.by is By.DLSN:  # the DLSN asked for, before any adjustment
        assert isinstance(position.value, DLSN)
        check_not_truncated(stream, position.value, segments, counters.max_sequence)
    index = segment_for(position, segments)
    if position.by is By.SEQ:
        assert isinstance(position.value, int)
        found_segment = None if index is None else segments[index]
        check_seq_not_truncated(stream, position.value, found_segment, counters.next_seq)
    if index is None:
        newest = max(segments[-1].sequence if segments else 0, counters.max_sequence)
        start = DLSN(newest + 1, 0, 0)  # beyond the end: the next segment's first record
    else:
        segment = segments[index]
        found = start_in_segment(position, segment)
        if found is None:
            if segment.archived_only:
                found = await asyncio.to_thread(find_archived, stream, segment, position)
            else:
                # a completed segment's ledger needs no sync (see _read_ledger)
                reader = await ledgers.open(segment.ledger_id, synced=segment.is_in_progress)
                last = reader.lac if reader.is_closed else await reader.read_lac()
                found = await search_segment(reader, segment, position, last)
            if position.by is not By.SEQ and segment.min_active is not None:
                found = max(found, segment.min_active)
        start = found
    check_not_truncated(stream, start, segments, counters.max_sequence)
    return start
