"""Reads of archived segments: the Parquet copies `globelog spark archive` makes (tiering).

An archived segment's copy is a Parquet dataset (a directory of part files, or the same on
any filesystem pyarrow reaches by URI: file:, s3:, gs:, hdfs:) with one row per user record
and the columns of ARCHIVE_COLUMNS. Once retention deleted the segment's ledger, every reader
takes its records from here (reader/log_reader.py, reader/ranges.py), so a read across an
archived-and-deleted range returns what it returned before. The part files are read with
a filter on `entry`, so a read of a few entries touches the part files that hold them only.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from core.dlsn import DLSN
from core.errors import DataLossError
from core.records import LogRecord
from core.segments import SegmentMetadata
from reader.positions import By, Position

# The columns an archive holds (the Spark data source's, less the stream name).
ARCHIVE_COLUMNS = (
    "dlsn", "segment", "entry", "slot", "txid", "seq", "payload", "writer_region",
    "write_time", "producer_id", "producer_seq",
)  # fmt: skip


def segment_archive_uri(root: str, namespace: str, stream: str, sequence: int) -> str:
    """Where a segment's copy goes under an archive root (directory or URI)."""
    return f"{root.rstrip('/')}/{namespace}/{stream}/segment-{sequence:018d}"


@dataclass(frozen=True, slots=True)
class ArchivedRange:
    """Entries first..last of an archived segment."""

    stream: str
    segment: int  # its sequence number
    uri: str  # its archive
    first_entry: int
    last_entry: int  # inclusive

    @classmethod
    def of(cls, stream: str, segment: SegmentMetadata, first: int, last: int) -> ArchivedRange:
        assert segment.archive is not None, segment
        return cls(stream, segment.sequence, segment.archive.uri, first, last)


def archived_table(part: ArchivedRange) -> Any:
    """Entries first..last of an archived segment as an Arrow table of ARCHIVE_COLUMNS in
    stream order, write_time as UTC microseconds. Blocking; DataLossError when unreadable."""
    import pyarrow as pa  # imported on first use: only archived reads need it
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    where = f"stream {part.stream!r} segment {part.segment}"
    try:
        dataset = ds.dataset(part.uri, format="parquet")
        entry = ds.field("entry")
        table = dataset.to_table(
            columns=list(ARCHIVE_COLUMNS),
            filter=(entry >= part.first_entry) & (entry <= part.last_entry),
        )
        # Whatever timestamp encoding the archive's writer chose (Spark: INT96 or micros).
        micros = pc.cast(table.column("write_time"), pa.timestamp("us", tz="UTC"), safe=False)
        table = table.set_column(table.schema.get_field_index("write_time"), "write_time", micros)
    except (OSError, ValueError) as err:  # pyarrow's errors derive from these
        raise DataLossError(
            f"{where}: the archive {part.uri} cannot be read: {err}", where, where
        ) from err
    return table.sort_by([("entry", "ascending"), ("slot", "ascending")])


def read_archived(part: ArchivedRange) -> list[LogRecord]:
    """The records of entries first..last of an archived segment, in stream order.

    Blocking (file or network reads): call it from a thread in an event loop
    (`read_archived_async`). DataLossError when the archive is unreadable.
    """
    import pyarrow as pa

    table = archived_table(part)
    millis = table.column("write_time").cast(pa.int64()).to_pylist()
    columns = table.to_pydict()
    columns["write_time"] = [None if m is None else m // 1000 for m in millis]
    return _records(columns)


def _records(columns: dict[str, list[Any]]) -> list[LogRecord]:
    records = []
    for i in range(len(columns["seq"])):
        records.append(
            LogRecord(
                dlsn=DLSN(columns["segment"][i], columns["entry"][i], columns["slot"][i]),
                txid=columns["txid"][i],
                seq=columns["seq"][i],
                payload=columns["payload"][i],
                write_time_ms=columns["write_time"][i],
                writer_region=columns["writer_region"][i],
                producer_id=columns["producer_id"][i],
                producer_seq=columns["producer_seq"][i],
            )
        )
    return records


async def read_archived_async(part: ArchivedRange) -> list[LogRecord]:
    return await asyncio.to_thread(read_archived, part)


def find_archived(stream: str, segment: SegmentMetadata, position: Position) -> DLSN:
    """The first record of an archived segment at or after `position` (by txid, seq or time),
    or the position after its last record when none qualifies. Blocking, like read_archived."""
    assert segment.archive is not None and position.by is not By.DLSN, (segment, position)
    last = segment.last_dlsn.entry if segment.last_dlsn is not None else -1
    table = archived_table(ArchivedRange.of(stream, segment, 0, last))
    if position.by is By.TIME:
        import pyarrow as pa

        values = [m // 1000 for m in table.column("write_time").cast(pa.int64()).to_pylist()]
    else:
        values = table.column("txid" if position.by is By.TXID else "seq").to_pylist()
    target = position.value
    assert isinstance(target, int)
    for i, value in enumerate(values):
        if value >= target:
            return DLSN(
                segment.sequence,
                table.column("entry")[i].as_py(),
                table.column("slot")[i].as_py(),
            )
    return DLSN(segment.sequence, last + 1, 0)
