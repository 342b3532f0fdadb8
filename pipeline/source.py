"""The `globelog` Spark data source (PySpark's Python data source API).

    from pipeline import register
    register(spark)
    df = spark.read.format("globelog").option("stream", "orders").load()

Options are checked on the driver when the query is planned, before any task starts
(pipeline/options.py, docs/spark.md). Batch reads plan one input partition per segment entry
range; Spark's workers read their partitions in parallel from the bookies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pipeline.batch import SCHEMA, ReadTask, plan_now, read_rows
from pipeline.options import SourceOptions, parse_source_options
from pipeline.streaming import Offsets, initial_offsets, latest_offsets, plan_batch


class RangePartition(InputPartition):
    """One entry range of one segment (a ReadTask)."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(task)
        self.task = task


class GlobelogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "globelog"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return GlobelogBatchReader(parse_source_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return GlobelogStreamReader(parse_source_options(self.options, streaming=True))


class GlobelogBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return _partitions(plan_now(self.options))

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        task = getattr(partition, "task", None)
        if task is None:
            return iter(())
        return read_rows(task)


def _partitions(tasks: list[ReadTask]) -> Sequence[InputPartition]:
    # Spark runs a read with no partition as one: an empty one stands for "nothing".
    return [RangePartition(t) for t in tasks] or [InputPartition(None)]


class GlobelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of every record between two offsets (per stream, the next DLSN).

    Offsets live in Spark's checkpoint; this reader keeps no state of its own but the
    Trigger.AvailableNow target, so a query restarted from its checkpoint reads on from there.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._ceiling: Offsets | None = None

    def initialOffset(self) -> dict[str, Any]:
        return asyncio.run(initial_offsets(self.options))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records_per_trigger is not None:
            return ReadMaxRows(self.options.max_records_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        max_records = max_bytes = None
        if not isinstance(limit, ReadAllAvailable):  # then every configured limit holds
            max_records = self.options.max_records_per_trigger
            max_bytes = self.options.max_bytes_per_trigger
            if isinstance(limit, ReadMaxRows):
                max_records = limit.max_rows
            if isinstance(limit, ReadMaxBytes):
                max_bytes = limit.max_bytes
        return asyncio.run(
            latest_offsets(self.options, dict(start), max_records, max_bytes, self._ceiling)
        )

    def prepareForTriggerAvailableNow(self) -> None:
        start = asyncio.run(initial_offsets(self.options))
        self._ceiling = asyncio.run(latest_offsets(self.options, start, None, None))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return _partitions(asyncio.run(plan_batch(self.options, dict(start), dict(end))))

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        task = getattr(partition, "task", None)
        return iter(()) if task is None else read_rows(task)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets are in Spark's checkpoint, the records stay in the log."""
