"""Structured Streaming reads of globelog streams, without Spark: offsets, admission control
and planning (pipeline/source.py wraps them in Spark's stream reader API).

An offset is, per stream, the DLSN of the next record to read (text, JSON-able):
`{"orders": "3.17.0", "clicks": "1.0.0"}`. A micro-batch reads [start, end) of each stream
with the batch reader's entry ranges. The end of the records available now is the entry
after the LAC of the newest segment (the next segment's first DLSN once it completed).
Admission control (`maxRecordsPerTrigger`, `maxBytesPerTrigger`) walks the entries after
the start on the driver, counting records and payload bytes, and ends the batch at the first
record that would pass either limit (a batch holds at least one record).
"""

from __future__ import annotations

from core.dlsn import DLSN
from pipeline.batch import ReadTask
from pipeline.options import SourceOptions
from reader.log_reader import resolve_position
from reader.positions import By, Position
from reader.ranges import last_readable_entry, plan_ranges, read_range, segment_range
from reader.session import ReadSession

Offsets = dict[str, str]


async def initial_offsets(session: ReadSession, options: SourceOptions) -> Offsets:
    """Where a new query starts: the first record at or after the starting position."""
    return {
        stream: str(await resolve_position(session.streams, session.ledgers, stream, options.start))
        for stream in options.streams
    }


async def latest_offsets(
    session: ReadSession,
    options: SourceOptions,
    start: Offsets,
    max_records: int | None,
    max_bytes: int | None,
    ceiling: Offsets | None = None,
) -> Offsets:
    """The end of the next batch from `start`: every record available now (below `ceiling`
    when given, for Trigger.AvailableNow), within the limits when given."""
    ends: Offsets = {}
    for stream in options.streams:
        begin = DLSN.parse(start.get(stream, "1.0.0"))
        end = await available_end(session, stream)
        if ceiling is not None and stream in ceiling:
            end = min(end, DLSN.parse(ceiling[stream]))
        end = max(end, begin)
        if (max_records is not None or max_bytes is not None) and end > begin:
            end = await _admit(session, stream, begin, end, max_records, max_bytes)
        ends[stream] = str(end)
    return ends


async def available_end(session: ReadSession, stream: str) -> DLSN:
    """The position just after the last record readable now."""
    # The counters before the list (as a reader resolving its start does): a segment started
    # between the two reads is then listed, not counted past and its records skipped.
    counters = await session.streams.counters(stream)
    segments = [v.segment for v in await session.streams.segments(stream)]
    if not segments:
        return DLSN(counters.max_sequence + 1, 0, 0)
    newest = segments[-1]
    if not newest.is_in_progress:
        return DLSN(newest.sequence + 1, 0, 0)
    lac = await last_readable_entry(session.ledgers, newest)
    return DLSN(newest.sequence, lac + 1, 0)


async def _admit(
    session: ReadSession,
    stream: str,
    begin: DLSN,
    end: DLSN,
    max_records: int | None,
    max_bytes: int | None,
) -> DLSN:
    """The first record from `begin` that passes a limit (after at least one), or `end`."""
    records = size = 0
    for segment in [v.segment for v in await session.streams.segments(stream)]:
        if segment.sequence < begin.segment or segment.sequence > end.segment:
            continue
        last = await last_readable_entry(session.ledgers, segment)
        if segment.sequence == end.segment:
            last = min(last, end.entry if end.slot else end.entry - 1)
        first = begin.entry if segment.sequence == begin.segment else 0
        part = segment_range(stream, segment, first, last, begin, end)
        async for batch in read_range(session.ledgers, part, streams=session.streams):
            for record in batch:
                over = (max_records is not None and records + 1 > max_records) or (
                    max_bytes is not None and size + len(record.payload) > max_bytes
                )
                if over and records > 0:
                    return record.dlsn
                records += 1
                size += len(record.payload)
    return end


async def plan_batch(
    session: ReadSession, options: SourceOptions, start: Offsets, end: Offsets
) -> list[ReadTask]:
    """The entry ranges of every stream between two offsets."""
    tasks: list[ReadTask] = []
    for stream in options.streams:
        low = DLSN.parse(start.get(stream, "1.0.0"))
        high = DLSN.parse(end.get(stream, str(low)))
        if high <= low:
            continue
        ranges = await plan_ranges(
            session.streams,
            session.ledgers,
            stream,
            Position(By.DLSN, low),
            Position(By.DLSN, high),
            options.entries_per_partition,
        )
        tasks += [
            ReadTask(str(options.topology_path), options.region, options.namespace, r)
            for r in ranges
        ]
    return tasks
