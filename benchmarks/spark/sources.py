"""The Spark side of `globelog bench spark` (benchmarks/spark/bench.py): timed reads by one query that
touches every column, interleaved across the sources compared, and the ceiling of Spark's
Python data source API on this machine: a source that does no work of its own (it yields Arrow
batches built once, shaped like the benchmark's records), read by the same query. No Python
data source can be faster."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import functions as sf
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline.batch import SCHEMA, arrow_schema

BATCH_ROWS = 32_768


def touch_every_column(df: Any) -> tuple[int, int]:
    """Records and payload bytes, by an aggregate that reads every column."""
    row = df.agg(
        sf.count("*").alias("n"),
        sf.sum(sf.length("payload")).alias("bytes"),
        sf.max("dlsn"), sf.sum("segment"), sf.sum("entry"), sf.sum("slot"), sf.sum("txid"),
        sf.sum("seq"), sf.max("writer_region"), sf.max("write_time"), sf.max("producer_id"),
        sf.max("producer_seq"),
    ).collect()[0]  # fmt: skip
    return int(row.n), int(row.bytes)


@dataclass(slots=True)
class TimedSource:
    """One source's reads in interleaved_reads: its partitions, the seconds of each timed read,
    the records and payload bytes the last one counted, and `measure`'s figures summed over
    the timed reads."""

    name: str
    load: Callable[[], Any]
    partitions: int = 0
    seconds: list[float] = field(default_factory=list)
    records: int = 0
    payload: int = 0
    measured: Any = None


def interleaved_reads(
    sources: Sequence[TimedSource],
    repeat: int,
    measure: Callable[[], Any],
    progress: Callable[[str], None],
) -> None:
    """One warm-up read of each source, then `repeat` rounds of one timed read of each, in
    turn: every source meets the JVM as warm as the others (Spark compiles each query's code,
    and the JIT keeps compiling over the first queries: a source read first, alone, pays for
    it). `measure` returns something that subtracts (CPU seconds, say): the difference over
    each timed read is summed into the source's `measured`."""
    for source in sources:
        df = source.load()
        source.partitions = df.rdd.getNumPartitions()
        touch_every_column(df)  # warm: Python workers started, classes loaded
    for i in range(repeat):
        for source in sources:
            before = measure()
            began = time.perf_counter()
            source.records, source.payload = touch_every_column(source.load())
            source.seconds.append(time.perf_counter() - began)
            spent = measure() - before
            source.measured = spent if source.measured is None else source.measured + spent
            rate = source.records / source.seconds[-1]
            progress(f"round {i + 1}/{repeat}: {source.name} {rate:,.0f} rec/s")


class Share(InputPartition):
    def __init__(self, rows: int) -> None:
        super().__init__(rows)
        self.rows = rows


class CeilingSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "globelog_bench_ceiling"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return CeilingReader(
            int(self.options["rows"]), int(self.options["size"]), int(self.options["partitions"])
        )


class CeilingReader(DataSourceReader):
    def __init__(self, rows: int, size: int, partitions: int) -> None:
        self.rows, self.size, self.parts = rows, size, partitions

    def partitions(self) -> Sequence[InputPartition]:
        share, extra = divmod(self.rows, self.parts)
        return [Share(share + (1 if i < extra else 0)) for i in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, Share)
        batch = _batch(min(BATCH_ROWS, max(partition.rows, 1)), self.size)
        left = partition.rows
        while left > 0:
            take = min(left, batch.num_rows)
            yield batch.slice(0, take)
            left -= take


def _batch(rows: int, size: int) -> Any:
    schema = arrow_schema()
    numbers = pa.array(range(rows), pa.int64())
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat("stream", rows).cast(pa.string()),
            pa.array([f"1.{i}.0" for i in range(rows)], pa.string()),
            pa.repeat(1, rows).cast(pa.int64()),
            numbers, numbers, numbers, numbers,
            pa.array([bytes(size)] * rows, pa.binary()),
            pa.repeat("us-east", rows).cast(pa.string()),
            numbers.cast(schema.field("write_time").type),
            pa.nulls(rows, pa.int64()),
            pa.nulls(rows, pa.int64()),
        ],
        schema=schema,
    )  # fmt: skip
