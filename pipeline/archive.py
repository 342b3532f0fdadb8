"""Tiered storage on Spark: copy a stream's completed segments to cold storage as Parquet.

    outcomes = archive_stream(spark, ArchiveJob(topology_path, "orders"))

Each completed segment not archived yet is read through the `globelog` data source (from
the bookies, in parallel by entry range) and written as a Parquet dataset under the archive
root (a directory or any Hadoop filesystem URI Spark writes to):
    <root>/<namespace>/<stream>/segment-<%018d sequence>/part-*.parquet
The copy is read back and checked (its sequence ids are dense and end on the segment's last
record) before the segment's metadata records it (`archive`, docs/metadata.md). A run that
dies between the write and the record leaves a copy the next run overwrites. Retention
(`globelog spark retention`) then deletes the ledgers of archived segments only, and readers
read those segments from their copy (reader/archive.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from core.dlsn import DLSN
from core.errors import ArchiveCheckError, ConfigError
from core.segments import ArchiveRef, SegmentMetadata, Truncation
from core.topology_loader import load_topology
from reader.archive import ARCHIVE_COLUMNS, segment_archive_uri
from reader.session import read_session
from writer.admin import mark_archived


@dataclass(frozen=True, slots=True)
class ArchiveJob:
    topology_path: Path
    stream: str
    namespace: str = "default"
    region: str | None = None  # where the job reads from (default: the topology's first)
    root: str | None = None  # the archive root (default: topology.yaml `archive.uri`)
    entries_per_partition: int = 1024


@dataclass(frozen=True, slots=True)
class ArchiveOutcome:
    segment: int
    uri: str
    records: int
    seconds: float


async def _candidates(job: ArchiveJob, region: str) -> list[SegmentMetadata]:
    topology = load_topology(job.topology_path)
    async with read_session(topology, region, job.namespace) as session:
        await session.streams.require(job.stream)
        return [
            v.segment
            for v in await session.streams.segments(job.stream)
            if not v.segment.is_in_progress
            and v.segment.archive is None
            and v.segment.truncation is not Truncation.TRUNCATED
        ]


async def _record(job: ArchiveJob, region: str, sequence: int, ref: ArchiveRef) -> None:
    topology = load_topology(job.topology_path)
    async with read_session(topology, region, job.namespace) as session:
        await mark_archived(session.streams, job.stream, sequence, ref)


def archive_stream(
    spark: SparkSession, job: ArchiveJob, progress: Callable[[str], None] = lambda _: None
) -> list[ArchiveOutcome]:
    """Archives every completed segment of the stream not archived yet, oldest first."""
    topology = load_topology(job.topology_path)
    root = job.root or topology.archive_uri
    if root is None:
        raise ConfigError(
            f"no archive to write to: {job.topology_path} has no `archive: {{uri: ...}}` "
            "section and no archive root was given (--to)"
        )
    region = job.region or topology.region_names[0]
    if region not in topology.region_names:
        raise ConfigError(f"region {region!r}: expected one of {list(topology.region_names)}")
    segments = asyncio.run(_candidates(job, region))
    progress(f"{job.stream}: {len(segments)} completed segment(s) to archive under {root}")
    outcomes = []
    for segment in segments:
        began = time.monotonic()
        uri = segment_archive_uri(root, job.namespace, job.stream, segment.sequence)
        records = 0 if segment.last_dlsn is None else _copy(spark, job, region, segment, uri)
        ref = ArchiveRef(uri, records, int(time.time() * 1000))
        asyncio.run(_record(job, region, segment.sequence, ref))
        outcomes.append(ArchiveOutcome(segment.sequence, uri, records, time.monotonic() - began))
        progress(
            f"  segment {segment.sequence}: {records} records -> {uri} "
            f"({outcomes[-1].seconds:.1f} s)"
        )
    return outcomes


def _copy(
    spark: SparkSession, job: ArchiveJob, region: str, segment: SegmentMetadata, uri: str
) -> int:
    """Writes the segment's records to `uri` and checks the copy; how many it holds."""
    start = segment.min_active or segment.first_dlsn
    df = (
        spark.read.format("globelog")
        .option("topology", str(job.topology_path))
        .option("namespace", job.namespace)
        .option("region", region)
        .option("stream", job.stream)
        .option("startingDlsn", str(start))
        .option("endingDlsn", str(DLSN(segment.sequence + 1, 0, 0)))
        .option("entriesPerPartition", str(job.entries_per_partition))
        .load()
        .select(*ARCHIVE_COLUMNS)
    )
    df.write.mode("overwrite").option("compression", "zstd").parquet(uri)
    row = (
        spark.read.parquet(uri)
        .agg(sf.count("*").alias("n"), sf.min("seq").alias("low"), sf.max("seq").alias("high"))
        .collect()[0]
    )
    count, low, high = int(row.n), row.low, row.high
    dense = count > 0 and high - low + 1 == count
    complete = high == segment.next_seq - 1 and (
        segment.min_active is not None or low == segment.first_seq
    )
    if not (dense and complete):
        raise ArchiveCheckError(
            f"stream {job.stream!r} segment {segment.sequence}: the copy at {uri} holds {count} "
            f"records with sequence ids {low}..{high}; expected "
            f"{segment.first_seq}..{segment.next_seq - 1} ({segment.record_count} records); "
            "the segment is not marked archived"
        )
    return count
