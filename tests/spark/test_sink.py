"""The `globelog` sink on the real cluster (write proxies running): a batch write whose task
fails mid-partition and runs again, and a streaming micro-batch replayed after a restart,
leave every row in the stream exactly once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from core.records import LogRecord
from localcluster.controller import Cluster
from pipeline.source import FAILPOINT_PROPERTY
from region.client import ProxyClient
from tests.spark.test_batch_read import write_stream
from tests.support.streams import fresh_namespace, stream_env

ROWS = 2000


def proxy_urls(cluster: Cluster) -> list[str]:
    return [
        f"https://{p.endpoint.host}:{p.endpoint.port}"
        for region in cluster.topology.regions
        for p in region.write_proxies
    ]


async def create(cluster: Cluster, namespace: str, stream: str) -> None:
    async with ProxyClient(proxy_urls(cluster), namespace) as client:
        await client.create(stream)


async def read_all(cluster: Cluster, namespace: str, stream: str) -> list[LogRecord]:
    await asyncio.sleep(0.2)  # past the flush SLA: the last entry is readable everywhere
    async with stream_env(cluster, "us-west", namespace) as env:
        reader = await env.reader(stream, follow=False)
        async with reader:
            return [r async for r in reader]


def sink(df: DataFrame, cluster: Cluster, namespace: str, stream: str) -> None:
    (
        df.write.format("globelog")
        .option("topology", str(cluster.topology_path))
        .option("namespace", namespace)
        .option("stream", stream)
        .mode("append")
        .save()
    )


def test_a_task_run_again_after_failing_midway_writes_no_duplicate(
    spark: SparkSession, services: Cluster, tmp_path: Path
) -> None:
    namespace = fresh_namespace()
    asyncio.run(create(services, namespace, "out"))
    df = spark.range(0, ROWS, numPartitions=4).selectExpr(
        "CAST(concat('row-', CAST(id AS STRING)) AS BINARY) AS payload"
    )
    # the first attempt of partition 1 fails after 400 of its 500 rows were acknowledged
    spark.sparkContext.setLocalProperty(FAILPOINT_PROPERTY, "1:400")
    try:
        sink(df, services, namespace, "out")
    finally:
        spark.sparkContext.setLocalProperty(FAILPOINT_PROPERTY, None)  # type: ignore[arg-type]
    records = asyncio.run(read_all(services, namespace, "out"))
    payloads = sorted(r.payload for r in records)
    assert payloads == sorted(f"row-{i}".encode() for i in range(ROWS)), "every row once"
    keys = [(r.producer_id, r.producer_seq) for r in records]
    assert len(set(keys)) == ROWS and len({p for p, _ in keys}) == 4  # a producer per task


def test_bad_sink_settings_are_refused_before_any_task(
    spark: SparkSession, cluster: Cluster
) -> None:
    df = spark.range(3).selectExpr("id AS payload")
    with pytest.raises(Exception, match="globelog sink") as caught:
        sink(df, cluster, "default", "bad name")
    message = str(caught.value)
    assert "column 'payload' is bigint; expected binary or string" in message
    assert "stream name 'bad name'" in message
    with pytest.raises(Exception, match="append-only"):
        df.selectExpr("CAST(payload AS STRING) AS payload").write.format("globelog").option(
            "stream", "s"
        ).option("topology", str(cluster.topology_path)).mode("overwrite").save()


def test_a_replayed_micro_batch_writes_no_duplicate(
    spark: SparkSession, services: Cluster, tmp_path: Path
) -> None:
    namespace = fresh_namespace()
    source = asyncio.run(write_stream(services, namespace, "in", 1000))
    asyncio.run(create(services, namespace, "out"))
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        query = (
            spark.readStream.format("globelog")
            .option("topology", str(services.topology_path))
            .option("namespace", namespace)
            .option("stream", "in")
            .option("maxRecordsPerTrigger", "250")
            .load()
            .select("payload")
            .writeStream.format("globelog")
            .option("topology", str(services.topology_path))
            .option("namespace", namespace)
            .option("stream", "out")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()

    run()
    assert len(asyncio.run(read_all(services, namespace, "out"))) == 1000
    commits = sorted(
        (p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    assert len(commits) >= 4, commits  # 1000 records in batches of at most 250
    last = commits[-1]
    last.unlink()  # as if the driver died after the sink wrote the batch, before its commit
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    run()  # Spark replays the last micro-batch
    records = asyncio.run(read_all(services, namespace, "out"))
    assert [r.payload for r in records] == [r.payload for r in source], "every record once"
