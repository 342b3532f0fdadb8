"""The delivery report on the real cluster: every record written while the readers watch is
observed in every region, no sooner than the WAN allows, and the per-minute throughput counts
every record of the rewound window; the table and the PNG are produced."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from pyspark.sql import SparkSession

from figures.plots import delivery_report_plot
from localcluster.controller import Cluster
from pipeline.report import ReportJob, delivery_report, report_text
from tests.support.streams import fresh_namespace, stream_env

EARLY, LIVE = 300, 120  # records written before the report, and while it watches


async def write(
    cluster: Cluster, namespace: str, stream: str, count: int, start: threading.Event | None
) -> None:
    """`count` records in bulks of 10, every 20 ms, once `start` is set."""
    async with stream_env(cluster, "us-east", namespace) as env:
        if not await env.streams.exists(stream):
            await env.streams.create_stream(stream)
        writer = await env.writer(stream)
        if start is not None:
            await asyncio.to_thread(start.wait, 60)
        for low in range(0, count, 10):
            await writer.write_bulk([f"record {i}".encode() for i in range(low, low + 10)])
            await asyncio.sleep(0.02)
        await writer.close()


def test_the_report_sees_every_live_record_in_every_region_and_counts_the_window(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    namespace = fresh_namespace()
    asyncio.run(write(cluster, namespace, "clicks", EARLY, None))
    watching = threading.Event()
    live = threading.Thread(
        target=lambda: asyncio.run(write(cluster, namespace, "clicks", LIVE, watching))
    )
    live.start()
    began = time.monotonic()
    try:
        job = ReportJob(cluster.topology_path, "clicks", namespace, since_s=600, observe_s=10)
        report = delivery_report(spark, job, watching=watching.set)
    finally:
        watching.set()
        live.join()
    assert time.monotonic() - began >= 10, "the readers watch for the whole window"

    assert sum(m.records for m in report.minutes) == EARLY + LIVE
    assert {m.writer_region for m in report.minutes} == {"us-east"}
    assert sum(m.payload_bytes for m in report.minutes) == sum(
        len(f"record {i}".encode()) for n in (EARLY, LIVE) for i in range(n)
    )
    lags = {lag.region: lag for lag in report.lags}
    assert set(lags) == set(cluster.topology.region_names)
    for region, lag in lags.items():
        assert lag.records == LIVE, region
        assert 0 <= lag.p50_ms <= lag.p90_ms <= lag.p99_ms <= lag.max_ms, lag
    one_way = {
        frozenset((link.region_a, link.region_b)): link.one_way_ms - link.jitter_ms
        for link in cluster.topology.wan.profiles[cluster.profile]
    }
    for region in ("us-west", "eu-west"):  # the entry crosses the WAN before it is there
        assert lags[region].p50_ms >= one_way[frozenset(("us-east", region))], lags[region]

    text = report_text(report, tmp_path / "r.png")
    assert "us-west" in text and f"{LIVE:>8}" in text
    plot = delivery_report_plot(tmp_path / "r.png", report)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
