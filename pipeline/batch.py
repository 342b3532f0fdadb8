"""Batch reads of globelog streams, without Spark: planning input partitions on the driver and
reading one partition's rows in a worker (the data source in pipeline/source.py calls these).

A partition is one segment's entry range (reader/ranges.py), read straight from the bookies
by the worker that gets it, local region first. Rows follow SCHEMA.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core.records import LogRecord
from core.topology_loader import load_topology
from pipeline.options import SourceOptions
from reader.ranges import EntryRange, plan_ranges, read_range
from reader.session import read_session

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


def row(stream: str, record: LogRecord) -> tuple[Any, ...]:
    """One record as a row of SCHEMA."""
    dlsn = record.dlsn
    return (
        stream,
        str(dlsn),
        dlsn.segment,
        dlsn.entry,
        dlsn.slot,
        record.txid,
        record.seq,
        record.payload,
        record.writer_region,
        datetime.fromtimestamp(record.write_time_ms / 1000, tz=UTC),
        record.producer_id,
        record.producer_seq,
    )


def read_rows(task: ReadTask) -> Iterator[tuple[Any, ...]]:
    """The partition's rows in stream order, read batch by batch (not all held at once)."""
    batches = _batches(task)
    with asyncio.Runner() as runner:
        try:
            while True:
                try:
                    records = runner.run(_next(batches))
                except StopAsyncIteration:
                    return
                stream = task.part.stream
                for record in records:
                    yield row(stream, record)
        finally:
            runner.run(batches.aclose())


async def _next(batches: AsyncGenerator[list[LogRecord], None]) -> list[LogRecord]:
    return await anext(batches)


async def _batches(task: ReadTask) -> AsyncGenerator[list[LogRecord], None]:
    topology = load_topology(task.topology_path)
    async with read_session(topology, task.region, task.namespace) as session:
        async for records in read_range(session.ledgers, task.part, streams=session.streams):
            yield records
