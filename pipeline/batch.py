"""Batch reads of globelog streams, without Spark: planning input partitions on the driver and
reading one partition's rows in a worker (the data source in pipeline/source.py calls these).

A partition is one segment's entry range (reader/ranges.py), read straight from the bookies
by the worker that gets it, local region first. Rows follow SCHEMA.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from core.entry_format import decode_entry_columns
from pipeline.options import SourceOptions
from pipeline.worker_loop import worker_loop
from reader.archive import ArchivedRange, archived_table
from reader.ranges import ENTRIES_PER_READ, EntryRange, plan_ranges, read_range_as
from reader.session import ReadSession, read_session

SCHEMA = (
    "stream string, dlsn string, segment long, entry long, slot long, txid long, seq long, "
    "payload binary, writer_region string, write_time timestamp, "
    "producer_id long, producer_seq long"
)
COLUMNS = tuple(part.split()[0] for part in SCHEMA.split(", "))


@dataclass(frozen=True, slots=True)
class ReadTask:
    """What a worker needs to read one partition: where the cluster is, and the range."""

    topology_path: str
    region: str
    namespace: str
    part: EntryRange


async def plan(options: SourceOptions) -> list[ReadTask]:
    """Every stream's ranges, stream by stream in the order given, each in stream order."""
    topology = options.topology()
    tasks: list[ReadTask] = []
    async with read_session(topology, options.region, options.namespace) as session:
        for stream in options.streams:
            ranges = await plan_ranges(
                session.streams,
                session.ledgers,
                stream,
                options.start,
                options.end,
                options.entries_per_partition,
            )
            tasks += [
                ReadTask(str(options.topology_path), options.region, options.namespace, r)
                for r in ranges
            ]
    return tasks


def plan_now(options: SourceOptions) -> list[ReadTask]:
    return asyncio.run(plan(options))


def read_arrow(task: ReadTask) -> Iterator[Any]:
    """The partition as Arrow record batches of SCHEMA (what Spark's Python data source takes
    without converting row by row), one per read of entries, read over this worker process's
    shared connections (pipeline/worker_loop.py)."""
    decoder = ArrowDecoder()

    def batches(session: ReadSession) -> AsyncIterator[Any]:
        return read_range_as(session.ledgers, task.part, decoder, ENTRIES_PER_READ, session.streams)

    key = (task.topology_path, task.region, task.namespace)
    return worker_loop().iterate(key, batches)


def arrow_schema() -> Any:
    """SCHEMA as Spark's Python workers expect Arrow batches of it (timestamps in UTC µs)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("stream", pa.string()), ("dlsn", pa.string()), ("segment", pa.int64()),
            ("entry", pa.int64()), ("slot", pa.int64()), ("txid", pa.int64()),
            ("seq", pa.int64()), ("payload", pa.binary()), ("writer_region", pa.string()),
            ("write_time", pa.timestamp("us", tz="UTC")), ("producer_id", pa.int64()),
            ("producer_seq", pa.int64()),
        ]
    )  # fmt: skip


class ArrowDecoder:
    """A range's entries straight into Arrow columns: no object per record (the entry decoder
    hands over columns, and the per-entry columns are repeated, not built record by record)."""

    def __init__(self) -> None:
        self.schema = arrow_schema()

    def from_entries(self, part: EntryRange, bodies: list[tuple[int, bytes]]) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        entries: list[int] = []
        slots: list[int] = []
        txids: list[int] = []
        payloads: list[bytes] = []
        seqs: list[int] = []
        micros: list[int] = []
        region_of: list[int] = []
        regions: dict[str, int] = {}
        producers: list[tuple[int, int, int]] = []
        for entry_id, body in bodies:
            where = f"stream {part.stream!r} segment {part.segment} entry {entry_id}"
            columns = decode_entry_columns(body, where)
            low, high = _within(part, entry_id, columns.slots)
            if low >= high:
                continue
            count = high - low
            base = len(txids) - low
            first = part.first_seq + columns.head.first_position
            entries += [entry_id] * count
            slots += columns.slots[low:high]
            txids += columns.txids[low:high]
            payloads += columns.payloads[low:high]
            seqs += range(first + low, first + high)
            micros += [columns.head.write_time_ms * 1000] * count
            region = regions.setdefault(columns.head.region, len(regions))
            region_of += [region] * count
            producers += [(base + i, p, q) for i, p, q in columns.producers if low <= i < high]
        rows = len(txids)
        if rows == 0:
            return None
        segment = pa.repeat(part.segment, rows).cast(pa.int64())
        entry = pa.array(entries, pa.int64())
        slot = pa.array(slots, pa.int64())
        dlsn = pc.binary_join_element_wise(
            pc.cast(segment, pa.string()), pc.cast(entry, pa.string()),
            pc.cast(slot, pa.string()), ".",
        )  # fmt: skip
        producer_id, producer_seq = _producer_columns(rows, producers)
        arrays = [
            pa.repeat(part.stream, rows).cast(pa.string()),
            dlsn,
            segment,
            entry,
            slot,
            pa.array(txids, pa.int64()),
            pa.array(seqs, pa.int64()),
            pa.array(payloads, pa.binary()),
            pc.take(pa.array(list(regions), pa.string()), pa.array(region_of, pa.int32())),
            pa.array(micros, pa.int64()).cast(self.schema.field("write_time").type),
            producer_id,
            producer_seq,
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def from_archive(self, part: EntryRange, archived: ArchivedRange) -> Any:
        import pyarrow as pa

        table = archived_table(archived)
        keep = _archived_within(part, table)
        if keep is not None:
            table = table.filter(keep)
        if table.num_rows == 0:
            return None
        table = table.add_column(0, "stream", pa.repeat(part.stream, table.num_rows))
        table = table.select(list(COLUMNS)).cast(self.schema)
        return table.combine_chunks().to_batches()[0]


def _within(part: EntryRange, entry_id: int, slots: list[int]) -> tuple[int, int]:
    """The user records of entry `entry_id` inside [part.start, part.end): indices low..high."""
    low, high = 0, len(slots)
    start, end = part.start, part.end
    if start.segment == part.segment and entry_id <= start.entry:
        low = high if entry_id < start.entry else bisect.bisect_left(slots, start.slot)
    if end is not None and end.segment == part.segment and entry_id >= end.entry:
        high = low if entry_id > end.entry else bisect.bisect_left(slots, end.slot)
    return low, max(low, high)


def _archived_within(part: EntryRange, table: Any) -> Any:
    """A mask of the archived rows inside [part.start, part.end), or None for all of them."""
    import pyarrow.compute as pc

    mask = None
    entry, slot = table.column("entry"), table.column("slot")
    start, end = part.start, part.end
    if start.segment == part.segment:
        after = pc.or_(
            pc.greater(entry, start.entry),
            pc.and_(pc.equal(entry, start.entry), pc.greater_equal(slot, start.slot)),
        )
        mask = after
    if end is not None and end.segment == part.segment:
        before = pc.or_(
            pc.less(entry, end.entry), pc.and_(pc.equal(entry, end.entry), pc.less(slot, end.slot))
        )
        mask = before if mask is None else pc.and_(mask, before)
    return mask


def _producer_columns(rows: int, producers: list[tuple[int, int, int]]) -> tuple[Any, Any]:
    import pyarrow as pa

    if not producers:
        return pa.nulls(rows, pa.int64()), pa.nulls(rows, pa.int64())
    ids: list[int | None] = [None] * rows
    seqs: list[int | None] = [None] * rows
    for index, producer, seq in producers:
        # Producer ids are u64 on the wire; the column is Spark's signed long (two's complement).
        ids[index] = producer - (1 << 64) if producer >= 1 << 63 else producer
        seqs[index] = seq
    return pa.array(ids, pa.int64()), pa.array(seqs, pa.int64())
