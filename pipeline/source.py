"""The `globelog` Spark data source (PySpark's Python data source API).

    from pipeline import register
    register(spark)
    df = spark.read.format("globelog").option("stream", "orders").load()

Options are checked on the driver when the query is planned, before any task starts
(pipeline/options.py, docs/spark.md). Batch reads plan entry ranges within segments and pack
consecutive ones into input partitions of up to entriesPerPartition entries; Spark's workers
read their partitions in parallel from the bookies.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from core.errors import ConfigError
from pipeline.batch import SCHEMA, ReadTask, pack, plan_now, read_arrow, session_key
from pipeline.options import SinkOptions, SourceOptions, parse_sink_options, parse_source_options
from pipeline.sink import SinkResult, append_rows, producer_id
from pipeline.streaming import Offsets, initial_offsets, latest_offsets, plan_batch
from pipeline.worker_loop import worker_loop
from reader.session import ReadSession

T = TypeVar("T")

FAILPOINT_PROPERTY = "globelog.sink.failpoint"


class RangePartition(InputPartition):
    """Consecutive entry ranges (ReadTasks), read one after the other by one task: ranges
    smaller than `entriesPerPartition` (a segment's last one, short segments) are packed
    together, across segments, since each Spark task has a cost of its own (tens of ms)."""

    def __init__(self, tasks: tuple[ReadTask, ...]) -> None:
        super().__init__(tasks)
        self.tasks = tasks


def _read_partition(partition: InputPartition) -> Iterator[Any]:
    for task in getattr(partition, "tasks", ()):
        yield from read_arrow(task)


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

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options, column = _sink(self.options, schema, overwrite)
        return GlobelogBatchWriter(options, column, uuid.uuid4().hex)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options, column = _sink(self.options, schema, overwrite)
        return GlobelogStreamWriter(options, column)


class GlobelogBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        wanted = self.options.min_partitions or os.cpu_count() or 1
        return _partitions(plan_now(self.options), self.options.entries_per_partition, wanted)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_partition(partition)


def _partitions(
    tasks: list[ReadTask], entries_per_partition: int, wanted: int
) -> Sequence[InputPartition]:
    """The tasks packed into input partitions (pipeline/batch.py `pack`)."""
    packed = pack(tasks, entries_per_partition, wanted)
    # Spark runs a read with no partition as one: an empty one stands for "nothing".
    return [RangePartition(tuple(group)) for group in packed] or [InputPartition(None)]


class GlobelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of every record between two offsets (per stream, the next DLSN).

    Offsets live in Spark's checkpoint; this reader keeps no state of its own but the
    Trigger.AvailableNow target, so a query restarted from its checkpoint reads on from there.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._ceiling: Offsets | None = None

    def _on_session(self, work: Callable[[ReadSession], Awaitable[T]]) -> T:
        """`work` on this process's session: the driver calls a stream reader at every
        trigger, and connecting each time would cost more than the planning."""
        return worker_loop().call(session_key(self.options), work)

    def initialOffset(self) -> dict[str, Any]:
        return self._on_session(lambda session: initial_offsets(session, self.options))

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
        return self._on_session(
            lambda session: latest_offsets(
                session, self.options, dict(start), max_records, max_bytes, self._ceiling
            )
        )

    def prepareForTriggerAvailableNow(self) -> None:
        start = self._on_session(lambda session: initial_offsets(session, self.options))
        self._ceiling = self._on_session(
            lambda session: latest_offsets(session, self.options, start, None, None)
        )

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        tasks = self._on_session(
            lambda session: plan_batch(session, self.options, dict(start), dict(end))
        )
        return _partitions(tasks, self.options.entries_per_partition, 1)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets are in Spark's checkpoint, the records stay in the log."""


# ------------------------------------------------------------------------------ the sink


def _sink(options: Any, schema: StructType, overwrite: bool) -> tuple[SinkOptions, int]:
    """The sink's options and the index of the payload column, checked on the driver."""
    problems: list[str] = []
    if overwrite:
        problems.append("a stream is append-only: write with mode('append'), not overwrite")
    names = [field.name for field in schema.fields]
    column = -1
    if "payload" not in names:
        problems.append(f"no column 'payload' (binary or string); the columns are {names}")
    else:
        column = names.index("payload")
        kind = schema.fields[column].dataType
        if not isinstance(kind, BinaryType | StringType):
            problems.append(f"column 'payload' is {kind.simpleString()}; expected binary or string")
    try:
        parsed = parse_sink_options(options)
    except ConfigError as err:
        problems.append(str(err).removeprefix("globelog sink: "))
    if problems:
        raise ConfigError("globelog sink: " + "; ".join(problems))
    return parsed, column


def _payloads(rows: Iterator[Row], column: int) -> Iterator[bytes]:
    for index, row in enumerate(rows):
        value = row[column]
        if isinstance(value, bytes | bytearray):
            yield bytes(value)
        elif isinstance(value, str):
            yield value.encode()
        else:
            raise ValueError(
                f"globelog sink: row {index} of the partition has payload {value!r}; "
                "expected bytes or a string (not null)"
            )


@dataclass(frozen=True, slots=True)
class SinkCommit(WriterCommitMessage):
    result: SinkResult


class GlobelogBatchWriter(DataSourceWriter):
    """df.write.format("globelog"): each task one producer, derived from this write's id and
    the partition, so a task Spark runs again skips what its earlier attempt wrote."""

    def __init__(self, options: SinkOptions, column: int, write_id: str) -> None:
        self.options = options
        self.column = column
        self.write_id = write_id

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        context = _task()
        producer = producer_id("batch", self.write_id, context.partitionId())
        rows = _payloads(iterator, self.column)
        return SinkCommit(append_rows(self.options, rows, producer, _failpoint(context)))


class GlobelogStreamWriter(DataSourceStreamWriter):
    """writeStream.format("globelog"): each task one producer, derived from the query's id
    (kept in its checkpoint), the micro-batch id and the partition, so a micro-batch replayed
    after a restart skips what was written the first time."""

    def __init__(self, options: SinkOptions, column: int) -> None:
        self.options = options
        self.column = column

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        context = _task()
        query = context.getLocalProperty("sql.streaming.queryId")
        batch = context.getLocalProperty("streaming.sql.batchId")
        if query is None or batch is None:
            raise RuntimeError(
                "globelog sink: the task does not name its streaming query and batch "
                f"(sql.streaming.queryId={query!r}, streaming.sql.batchId={batch!r})"
            )
        producer = producer_id("stream", query, batch, context.partitionId())
        rows = _payloads(iterator, self.column)
        return SinkCommit(append_rows(self.options, rows, producer, _failpoint(context)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every row is acknowledged by the stream once its task ended."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo in an append-only log; a replay of the batch skips what landed."""


def _failpoint(context: TaskContext) -> int | None:
    """Rows after which the first attempt of a task fails, when the job's local property
    FAILPOINT_PROPERTY is "PARTITION:ROWS" for this task's partition (fault-injection tests
    of a pipeline's recovery; docs/spark.md)."""
    text = context.getLocalProperty(FAILPOINT_PROPERTY)
    if not text or context.attemptNumber() != 0:
        return None
    partition, _, rows = text.partition(":")
    if not (partition.isdigit() and rows.isdigit()):
        raise ValueError(f"{FAILPOINT_PROPERTY} is {text!r}; expected PARTITION:ROWS")
    return int(rows) if int(partition) == context.partitionId() else None


def _task() -> TaskContext:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("globelog sink: write() runs in a Spark task only")
    return context
