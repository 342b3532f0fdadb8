"""Batch reads of globelog streams, without Spark: planning input partitions on the driver and
reading one partition's rows in a worker (the data source in pipeline/source.py calls these).

A partition is one segment's entry range (reader/ranges.py), read straight from the bookies
by the worker that gets it, local region first. Rows follow SCHEMA.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from typing import Any

from core.entry_format import EntryHead
from core.errors import EntryFormatError
from pipeline.options import SourceOptions
from pipeline.worker_loop import SessionKey, worker_loop
from reader.archive import ArchivedRange, archived_table
from reader.ranges import (
    ENTRIES_PER_READ,
    EntryRange,
    plan_ranges,
    read_range_as,
    split_range,
)
from reader.session import ReadSession

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


async def plan(session: ReadSession, options: SourceOptions) -> list[ReadTask]:
    """Every stream's entry ranges, stream by stream in the order given, each in stream order
    and of at most entriesPerPartition entries."""
    tasks: list[ReadTask] = []
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
    """`plan` on this process's session (pipeline/worker_loop.py): Spark plans each query in
    a long-lived Python worker, which then connects once, not once per query."""
    return worker_loop().call(session_key(options), lambda session: plan(session, options))


def session_key(options: SourceOptions) -> SessionKey:
    return str(options.topology_path), options.region, options.namespace


def pack(tasks: list[ReadTask], entries_per_partition: int, wanted: int) -> list[list[ReadTask]]:
    """The tasks' entries in order, cut into the fewest partitions of near-equal size (one
    entry apart at most) that hold at most `entries_per_partition` entries each and whose
    count is a multiple of `wanted` (the cores: then no partition runs alone at the end), or
    one partition per entry when there are fewer entries than that. A range is cut where a
    partition ends; none is empty. No task: no partition."""
    total = sum(task.part.entries for task in tasks)
    if total == 0:
        return []
    count = math.ceil(math.ceil(total / entries_per_partition) / wanted) * wanted
    count = min(count, total)
    ends = [round(total * (i + 1) / count) for i in range(count)]  # cumulative, ends[-1]=total
    groups: list[list[ReadTask]] = [[] for _ in range(count)]
    group = done = 0
    for task in tasks:
        if task.part.entries < 1:
            continue  # (the planner makes none)
        rest: EntryRange | None = task.part
        while rest is not None:
            while done >= ends[group]:
                group += 1
            head, rest = split_range(rest, ends[group] - done)
            groups[group].append(replace(task, part=head))
            done += head.entries
    return groups


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
    """A range's entries straight into Arrow columns: no object per record (each read of
    entries is decoded at once, pipeline/entry_columns.py, and the columns that hold per entry
    are gathered by the rows' entry index)."""

    def __init__(self) -> None:
        self.schema = arrow_schema()

    def from_entries(self, part: EntryRange, bodies: list[tuple[int, bytes]]) -> Any:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from pipeline.entry_columns import decode_run

        where = f"stream {part.stream!r} segment {part.segment} entry"
        wheres = [f"{where} {e}" for e, _ in bodies]
        run = decode_run([body for _, body in bodies], wheres)
        entry_ids = np.fromiter((e for e, _ in bodies), np.int64, len(bodies))
        inside = _within(part, entry_ids[run.entry_index], run.slots)
        if inside is not None and not inside.all():
            run = run.take(inside)
        rows = len(run)
        if rows == 0:
            return None
        heads = run.heads
        _check_columns(heads, part, wheres)
        entry = entry_ids[run.entry_index]
        prefixes = pa.array([f"{part.segment}.{e}." for e in entry_ids.tolist()], pa.string())
        dlsn = pc.binary_join_element_wise(
            prefixes.take(pa.array(run.entry_index)), pc.cast(pa.array(run.slots), pa.string()), ""
        )
        first_seq = np.fromiter(
            (part.first_seq + h.first_position for h in heads), np.int64, len(heads)
        )
        micros = np.fromiter((h.write_time_ms * 1000 for h in heads), np.int64, len(heads))
        regions: dict[str, int] = {}
        region_of = np.fromiter(
            (regions.setdefault(h.region, len(regions)) for h in heads), np.int32, len(heads)
        )
        unset = ~run.producer_set
        arrays = [
            pa.repeat(part.stream, rows).cast(pa.string()),
            dlsn,
            pa.repeat(part.segment, rows).cast(pa.int64()),
            pa.array(entry),
            pa.array(run.slots),
            pa.array(run.txids),
            pa.array(first_seq[run.entry_index] + run.ranks),
            run.payloads,
            pc.take(pa.array(list(regions), pa.string()), pa.array(region_of[run.entry_index])),
            pa.array(micros[run.entry_index]).cast(self.schema.field("write_time").type),
            pa.array(run.producer_ids, mask=unset),
            pa.array(run.producer_seqs, mask=unset),
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


_INT64_MAX = (1 << 63) - 1


def _check_columns(heads: list[EntryHead], part: EntryRange, wheres: list[str]) -> None:
    """EntryFormatError naming the first entry whose write time or sequence ids do not fit the
    columns (a timestamp in µs, a long): the entry format allows them, Spark cannot hold them."""
    for head, where in zip(heads, wheres, strict=True):
        if not -_INT64_MAX <= head.write_time_ms * 1000 <= _INT64_MAX:
            raise EntryFormatError(
                f"{where}: write time {head.write_time_ms} ms is beyond what a timestamp holds"
            )
        if part.first_seq + head.first_position + head.count > _INT64_MAX:
            raise EntryFormatError(
                f"{where}: first position {head.first_position} (segment's first sequence id "
                f"{part.first_seq}) gives sequence ids beyond a long"
            )


def _within(part: EntryRange, entries: Any, slots: Any) -> Any:
    """A mask of the rows (by their entry ids and slots, in stream order) inside
    [part.start, part.end), or None when every row is."""
    if not len(entries):
        return None
    mask = None
    start, end = part.start, part.end
    if start.segment == part.segment and int(entries[0]) <= start.entry:
        mask = (entries > start.entry) | ((entries == start.entry) & (slots >= start.slot))
    if end is not None and end.segment == part.segment and int(entries[-1]) >= end.entry:
        before = (entries < end.entry) | ((entries == end.entry) & (slots < end.slot))
        mask = before if mask is None else mask & before
    return mask


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
