"""Structured Streaming reads through the `globelog` data source on the real cluster:
admission control per micro-batch, new segments picked up, and a query stopped and restarted
from its checkpoint delivering every record exactly once to a file sink."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from localcluster.controller import Cluster
from tests.spark.test_batch_read import write_stream
from tests.support.streams import fresh_namespace, stream_env


def stream_of(spark: SparkSession, cluster: Cluster, namespace: str, **options: str) -> DataFrame:
    source = spark.readStream.format("globelog").option("topology", str(cluster.topology_path))
    return source.option("namespace", namespace).options(**options).load()


def run_available_now(df: DataFrame, out: Path, checkpoint: Path) -> list[int]:
    """Runs the query to the records available now; the input rows of each micro-batch."""
    query = (
        df.select("stream", "dlsn", "seq", "payload")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    return [int(p["numInputRows"]) for p in query.recentProgress]


def output_seqs(spark: SparkSession, out: Path) -> list[int]:
    return sorted(r.seq for r in spark.read.parquet(str(out)).select("seq").collect())


async def append(cluster: Cluster, namespace: str, stream: str, first: int, count: int) -> None:
    async with stream_env(cluster, "us-west", namespace) as env:
        writer = await env.writer(stream, segment_roll_bytes=20_000)
        await writer.write_bulk([f"late-{i}".encode() for i in range(first, first + count)])
        await writer.close()


def test_admission_control_bounds_each_micro_batch(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    namespace = fresh_namespace()
    asyncio.run(write_stream(cluster, namespace, "orders", 2000))
    df = stream_of(spark, cluster, namespace, stream="orders", maxRecordsPerTrigger="300")
    rows = run_available_now(df, tmp_path / "out", tmp_path / "checkpoint")
    batches = [n for n in rows if n > 0]
    assert sum(batches) == 2000 and max(batches) <= 300, batches
    assert output_seqs(spark, tmp_path / "out") == list(range(2000))


def test_bytes_admission_control_bounds_each_micro_batch(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    namespace = fresh_namespace()
    asyncio.run(write_stream(cluster, namespace, "orders", 1000))  # 36-byte payloads
    df = stream_of(spark, cluster, namespace, stream="orders", maxBytesPerTrigger="3600")
    rows = [n for n in run_available_now(df, tmp_path / "o", tmp_path / "c") if n > 0]
    assert sum(rows) == 1000 and max(rows) <= 100, rows


def test_a_restarted_query_delivers_every_record_once_including_new_segments(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    namespace = fresh_namespace()
    asyncio.run(write_stream(cluster, namespace, "orders", 1000))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = stream_of(spark, cluster, namespace, stream="orders", maxRecordsPerTrigger="200")
    query = (
        df.select("stream", "dlsn", "seq", "payload")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    deadline = time.monotonic() + 120
    while sum(int(p["numInputRows"]) for p in query.recentProgress) < 400:
        assert time.monotonic() < deadline, query.recentProgress
        time.sleep(0.2)
    query.stop()  # mid-stream: some batches done, more records waiting
    delivered_before = output_seqs(spark, out)
    assert 400 <= len(delivered_before) < 1000
    asyncio.run(append(cluster, namespace, "orders", 1000, 500))  # new segments
    rows = run_available_now(
        stream_of(spark, cluster, namespace, stream="orders", maxRecordsPerTrigger="200"),
        out,
        checkpoint,
    )
    assert max(rows) <= 200
    assert output_seqs(spark, out) == list(range(1500)), "every record once"
