"""Tiered storage on the real cluster: completed segments archived to Parquet by the Spark
job, their ledgers deleted by retention, and every reader (the library reader, a position
search, the data source in batch and in streaming with admission control) still returning
the same records."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from core.errors import ConfigError
from core.records import LogRecord
from ledger import NoSuchLedgerMetadataError
from localcluster.controller import Cluster
from pipeline.archive import ArchiveJob, archive_stream
from reader.positions import By, Position
from tests.spark.test_batch_read import as_records, expected, load, write_stream
from tests.spark.test_stream_read import output_seqs, run_available_now, stream_of
from tests.support.streams import fresh_namespace, stream_env
from writer.admin import RetentionResult, apply_retention

FAR_FUTURE_MS = 4_000_000_000_000  # every completed segment is past any TTL then


async def library_read(
    cluster: Cluster, namespace: str, stream: str, start: Position | None = None
) -> list[LogRecord]:
    async with stream_env(cluster, "us-west", namespace) as env:
        reader = await env.reader(stream, start, follow=False)
        async with reader:
            return [r async for r in reader]


async def expire(cluster: Cluster, namespace: str, stream: str, archived: bool) -> RetentionResult:
    async with stream_env(cluster, "us-east", namespace) as env:
        return await apply_retention(
            env.streams, env.ledgers, stream, 1.0, now_ms=FAR_FUTURE_MS, archive_required=archived
        )


async def ledger_exists(cluster: Cluster, namespace: str, ledger_id: int) -> bool:
    async with stream_env(cluster, "us-east", namespace) as env:
        try:
            await env.ledgers.open(ledger_id)
        except NoSuchLedgerMetadataError:
            return False
        return True


def test_a_read_across_archived_and_deleted_segments_returns_the_same_records(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    namespace = fresh_namespace()
    records = asyncio.run(write_stream(cluster, namespace, "events", 2000))
    segments = sorted({r.dlsn.segment for r in records})
    assert len(segments) >= 3, "the stream spans several segments"
    middle = records[len(records) // 2]
    before = as_records(load(spark, cluster, namespace, stream="events"))
    assert before == expected("events", records)

    job = ArchiveJob(cluster.topology_path, "events", namespace, root=str(tmp_path / "cold"))
    outcomes = archive_stream(spark, job)
    assert [o.segment for o in outcomes] == segments, "every completed segment is archived"
    by_segment = {s: sum(1 for r in records if r.dlsn.segment == s) for s in segments}
    assert {o.segment: o.records for o in outcomes} == by_segment
    assert archive_stream(spark, job) == [], "archived segments are not copied twice"

    result = asyncio.run(expire(cluster, namespace, "events", archived=True))
    assert [s.sequence for s in result.expired] == segments
    for segment in result.expired:
        assert not asyncio.run(ledger_exists(cluster, namespace, segment.ledger_id))

    after = as_records(load(spark, cluster, namespace, stream="events"))
    assert after == before, "the data source reads the archive"
    assert asyncio.run(library_read(cluster, namespace, "events")) == records
    for by, value in ((By.TXID, middle.txid), (By.SEQ, middle.seq), (By.DLSN, middle.dlsn)):
        from_middle = asyncio.run(library_read(cluster, namespace, "events", Position(by, value)))
        assert from_middle == records[len(records) // 2 :], by
    ranged = load(
        spark, cluster, namespace, stream="events", startingSeq=str(middle.seq),
        endingSeq=str(middle.seq + 7),
    )  # fmt: skip
    assert [r[3] for r in as_records(ranged)] == list(range(middle.seq, middle.seq + 7))
    streamed = stream_of(spark, cluster, namespace, stream="events", maxRecordsPerTrigger="700")
    batches = run_available_now(streamed, tmp_path / "out", tmp_path / "checkpoint")
    assert max(batches) <= 700 and sum(batches) == len(records), batches
    assert output_seqs(spark, tmp_path / "out") == [r.seq for r in records]


def test_retention_with_an_archive_configured_keeps_segments_not_archived_yet(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    records = asyncio.run(write_stream(cluster, namespace, "raw", 600))
    result = asyncio.run(expire(cluster, namespace, "raw", archived=True))
    assert result.expired == ()
    assert result.waiting_for_archive == records[0].dlsn.segment
    assert asyncio.run(library_read(cluster, namespace, "raw")) == records


def test_an_archive_job_without_an_archive_root_says_where_to_configure_one(
    spark: SparkSession, cluster: Cluster
) -> None:
    with pytest.raises(ConfigError, match=re.escape("no `archive: {uri: ...}` section")):
        archive_stream(spark, ArchiveJob(cluster.topology_path, "raw", fresh_namespace()))


def test_a_reader_open_across_the_deletion_reads_every_record_on_through_the_archive(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    namespace = fresh_namespace()
    records = asyncio.run(write_stream(cluster, namespace, "moving", 1500))
    first_segment = [r for r in records if r.dlsn.segment == records[0].dlsn.segment]
    assert len(first_segment) > 100

    async def read_across_the_deletion() -> list[LogRecord]:
        async with stream_env(cluster, "us-west", namespace) as env:
            # A reader that reads ahead one entry (and a few records) at a time.
            reader = await env.reader(
                "moving", follow=False, readahead_entries=1, readahead_records_max=8
            )
            async with reader:
                got = [await reader.read_next(10.0) for _ in range(40)]
                job = ArchiveJob(cluster.topology_path, "moving", namespace, root=str(tmp_path))
                await asyncio.to_thread(archive_stream, spark, job)
                result = await apply_retention(
                    env.streams, env.ledgers, "moving", 1.0, now_ms=FAR_FUTURE_MS,
                    archive_required=True,
                )  # fmt: skip
                assert result.expired, "the segments being read were deleted from the bookies"
                async for record in reader:
                    got.append(record)
                return [r for r in got if r is not None]

    assert asyncio.run(read_across_the_deletion()) == records
