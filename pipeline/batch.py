"""Batch reads of globelog streams, without Spark: planning input partitions on the driver and
reading one partition's rows in a worker (the data source in pipeline/source.py calls these).

A partition is one segment's entry range (reader/ranges.py), read straight from the bookies
by the worker that gets it, local region first. Rows follow SCHEMA.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from core.entry_format import (
    RECORD_OVERHEAD_BYTES,
    EntryColumns,
    EntryHead,
    decode_entry_columns,
    open_entry,
    record_starts,
)
from core.records import KNOWN_FLAGS, NO_POSITION, PRODUCER_PREFIX_BYTES, RecordFlag
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
# A record's header in an entry's raw body (core/entry_format.py), as numpy reads it.
_RECORD_DTYPE = [("txid", ">i8"), ("flags", ">u2"), ("length", ">u4")]


# Ranges per partition when a read is cut finer for min_partitions (pieces to pack evenly).
PIECES_PER_PARTITION = 8


@dataclass(frozen=True, slots=True)
class ReadTask:
    """What a worker needs to read one partition: where the cluster is, and the range."""

    topology_path: str
    region: str
    namespace: str
    part: EntryRange


async def plan(options: SourceOptions) -> list[ReadTask]:
    """Every stream's ranges, stream by stream in the order given, each in stream order: of
    at most entriesPerPartition entries, and finer when that would give fewer than
    min_partitions partitions, so that packing them back up to partition_entries makes
    partitions of nearly equal size (with 2 cores, 2 partitions and not 3: the third would
    run alone)."""
    tasks = await _plan(options, options.entries_per_partition)
    bound = partition_entries(options, tasks)
    if bound < options.entries_per_partition:
        tasks = await _plan(options, max(1, bound // PIECES_PER_PARTITION))
    return tasks


def partition_entries(options: SourceOptions, tasks: list[ReadTask]) -> int:
    """The entry bound of one input partition for these tasks: entriesPerPartition, or less
    so that there are min_partitions partitions when there are that many entries."""
    wanted = options.min_partitions or os.cpu_count() or 1
    total = sum(task.part.entries for task in tasks)
    bound = math.ceil(total / wanted)
    if bound >= options.entries_per_partition:
        return options.entries_per_partition
    return max(1, bound + bound // PIECES_PER_PARTITION)  # room for the pieces' rounding


async def _plan(options: SourceOptions, entries_per_partition: int) -> list[ReadTask]:
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
                entries_per_partition,
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
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        entries: list[Any] = []
        slots: list[Any] = []
        txids: list[Any] = []
        lengths: list[Any] = []
        values: list[Any] = []
        seqs: list[Any] = []
        micros: list[Any] = []
        region_of: list[Any] = []
        regions: dict[str, int] = {}
        producer_ids: list[Any] = []
        producer_seqs: list[Any] = []
        producer_set: list[Any] = []
        for entry_id, body in bodies:
            where = f"stream {part.stream!r} segment {part.segment} entry {entry_id}"
            head, columns = entry_arrays(body, where)
            low, high = _within(part, entry_id, columns.slots)
            if low >= high:
                continue
            count = high - low
            first = part.first_seq + head.first_position
            entries.append(np.full(count, entry_id, np.int64))
            slots.append(columns.slots[low:high])
            txids.append(columns.txids[low:high])
            lengths.append(columns.lengths[low:high])
            values.append(columns.values[columns.offsets[low] : columns.offsets[high]])
            seqs.append(np.arange(first + low, first + high, dtype=np.int64))
            micros.append(np.full(count, head.write_time_ms * 1000, np.int64))
            region = regions.setdefault(head.region, len(regions))
            region_of.append(np.full(count, region, np.int32))
            producer_ids.append(columns.producer_ids[low:high])
            producer_seqs.append(columns.producer_seqs[low:high])
            producer_set.append(columns.producer_set[low:high])
        if not txids:
            return None
        rows = sum(len(t) for t in txids)
        segment = pa.repeat(part.segment, rows).cast(pa.int64())
        entry = pa.array(np.concatenate(entries))
        slot = pa.array(np.concatenate(slots))
        dlsn = pc.binary_join_element_wise(
            pc.cast(segment, pa.string()), pc.cast(entry, pa.string()),
            pc.cast(slot, pa.string()), ".",
        )  # fmt: skip
        unset = ~np.concatenate(producer_set)
        arrays = [
            pa.repeat(part.stream, rows).cast(pa.string()),
            dlsn,
            segment,
            entry,
            slot,
            pa.array(np.concatenate(txids)),
            pa.array(np.concatenate(seqs)),
            _binary(np.concatenate(lengths), np.concatenate(values)),
            pc.take(pa.array(list(regions), pa.string()), pa.array(np.concatenate(region_of))),
            pa.array(np.concatenate(micros)).cast(self.schema.field("write_time").type),
            pa.array(np.concatenate(producer_ids), mask=unset),
            pa.array(np.concatenate(producer_seqs), mask=unset),
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


@dataclass(frozen=True, slots=True)
class EntryArrays:
    """One entry's user records as numpy columns (entry_arrays). `values` holds the payloads
    back to back; payload i is values[offsets[i]:offsets[i + 1]]. A record without a producer
    has producer_set False (its id and seq are 0)."""

    slots: Any  # int64: each record's index among the entry's records
    txids: Any  # int64
    lengths: Any  # int64: payload bytes
    offsets: Any  # int64, one more than records
    values: Any  # uint8
    producer_ids: Any  # int64 (u64 on the wire, as two's complement)
    producer_seqs: Any  # int64
    producer_set: Any  # bool


def entry_arrays(body: bytes, where: str) -> tuple[EntryHead, EntryArrays]:
    """An entry's header and user records as numpy columns, checked as strictly as
    decode_entry_columns: the records' headers are read and checked in bulk, and anything
    malformed is left to decode_entry_columns, which names it."""
    head, raw = open_entry(body, where)
    starts = record_starts(raw, head.count)
    columns = None if starts is None else _bulk_arrays(raw, starts)
    if columns is None:
        columns = _strict_arrays(decode_entry_columns(body, where))  # raises, naming the fault
    return head, columns


def _bulk_arrays(raw: memoryview, starts: list[int]) -> EntryArrays | None:
    """The user records of a raw body whose record lengths tile it (record_starts); None if a
    record's txid, flags or producer prefix is invalid."""
    import numpy as np

    data = np.frombuffer(raw, np.uint8)
    at = np.asarray(starts, np.int64)
    header_at = (at[:, None] + np.arange(RECORD_OVERHEAD_BYTES)).ravel()
    headers = data[header_at].view(_RECORD_DTYPE)
    txid = headers["txid"].astype(np.int64)
    flags = headers["flags"].astype(np.int64)
    length = headers["length"].astype(np.int64)
    producer = (flags & int(RecordFlag.PRODUCER)) != 0
    if (txid < 0).any() or (flags & ~int(KNOWN_FLAGS)).any():
        return None
    if (producer & (length < PRODUCER_PREFIX_BYTES)).any():
        return None
    keep = np.ones(len(data), bool)
    keep[header_at] = False
    user = (flags & int(NO_POSITION)) == 0
    for index in np.nonzero(~user)[0]:  # control and end-of-stream records: rare
        payload_at = int(at[index]) + RECORD_OVERHEAD_BYTES
        keep[payload_at : payload_at + int(length[index])] = False
    with_id = producer & user
    ids = np.zeros(len(starts), np.int64)
    seqs = np.zeros(len(starts), np.int64)
    if with_id.any():
        prefix_at = (
            at[with_id][:, None] + RECORD_OVERHEAD_BYTES + np.arange(PRODUCER_PREFIX_BYTES)
        ).ravel()
        prefix = data[prefix_at].view(">u8").astype(np.uint64).view(np.int64)
        ids[with_id], seqs[with_id] = prefix[0::2], prefix[1::2]
        keep[prefix_at] = False
    lengths = (length - PRODUCER_PREFIX_BYTES * producer)[user]
    return EntryArrays(
        np.nonzero(user)[0].astype(np.int64),
        txid[user],
        lengths,
        np.concatenate(([0], np.cumsum(lengths))),
        data[keep],
        ids[user],
        seqs[user],
        with_id[user],
    )


def _strict_arrays(columns: EntryColumns) -> EntryArrays:
    """decode_entry_columns' lists as EntryArrays."""
    import numpy as np

    lengths = np.array([len(p) for p in columns.payloads], np.int64)
    ids = np.zeros(len(lengths), np.int64)
    seqs = np.zeros(len(lengths), np.int64)
    set_ = np.zeros(len(lengths), bool)
    for index, producer, seq in columns.producers:
        ids[index] = producer - (1 << 64) if producer >= 1 << 63 else producer
        seqs[index], set_[index] = seq, True
    return EntryArrays(
        np.array(columns.slots, np.int64),
        np.array(columns.txids, np.int64),
        lengths,
        np.concatenate(([0], np.cumsum(lengths))),
        np.frombuffer(b"".join(columns.payloads), np.uint8),
        ids,
        seqs,
        set_,
    )


def _binary(lengths: Any, values: Any) -> Any:
    """An Arrow binary column from payload lengths and their bytes back to back."""
    import numpy as np
    import pyarrow as pa

    offsets = np.concatenate(([0], np.cumsum(lengths)))
    assert offsets[-1] < 1 << 31, "one batch's payloads exceed a binary column's 2 GiB"
    buffers = [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(values)]
    return pa.Array.from_buffers(pa.binary(), len(lengths), buffers)
