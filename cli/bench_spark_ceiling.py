"""The ceiling of Spark's Python data source API on this machine, for `globelog bench spark`:
a source that does no work of its own (it yields Arrow batches built once, shaped like the
benchmark's records), read by the same query. No Python data source can be faster."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline.batch import SCHEMA, arrow_schema

BATCH_ROWS = 32_768


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
