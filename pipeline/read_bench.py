"""The Spark side of `globelog bench spark` (cli/bench_spark.py): timed reads by one query that
touches every column, and the ceiling of Spark's Python data source API on this machine: a
source that does no work of its own (it yields Arrow batches built once, shaped like the
benchmark's records), read by the same query. No Python data source can be faster."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
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


def timed_reads(
    name: str, load: Callable[[], Any], repeat: int, progress: Callable[[str], None]
) -> tuple[int, list[float], int, int]:
    """Partitions, the seconds of each of `repeat` reads (after one warm-up), and the records
    and payload bytes the last one counted."""
    df = load()
    partitions = df.rdd.getNumPartitions()
    touch_every_column(df)  # warm: Python workers started, classes loaded
    seconds = []
    records = payload = 0
    for i in range(repeat):
        began = time.perf_counter()
        records, payload = touch_every_column(load())
        seconds.append(time.perf_counter() - began)
        progress(f"{name} read {i + 1}/{repeat}: {records / seconds[-1]:,.0f} rec/s")
    return partitions, seconds, records, payload


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
