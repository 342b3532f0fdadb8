"""`globelog bench spark`: the `globelog` data source's read throughput from the bookies,
against Spark reading the same records from their Parquet archive (the scan it should come
close to), in one local SparkSession on the same cores.

The stream is written once (library writer, bulk), archived with the archive job, then each
read runs the same aggregate touching every column, `--repeat` times; the table shows the
median and spread of records/s and MB/s, the partition count and the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cli import event_loop
from cli.bench_ledger_options import (
    add_cluster_arguments,
    bench_cluster,
    check_cluster_ports,
    on_bench_cluster,
)
from cli.cluster.controller import Cluster
from cli.tools import find_tools
from core.errors import ConfigError
from global_meta import MetaStore
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient, LedgerConfig
from writer.log_writer import LogWriter, WriterConfig

BULK = 1000  # records per write_bulk


@dataclass(frozen=True, slots=True)
class SparkWorkload:
    records: int
    size: int
    repeat: int
    cores: int
    entries_per_partition: int
    region: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per record")
    parser.add_argument("--repeat", type=int, default=3, help="reads of each kind")
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--entries-per-partition", type=int, default=256)
    parser.add_argument("--region", default="us-east", help="where the writer and readers run")


def run(args: argparse.Namespace) -> int:
    problems: list[str] = []
    cluster = bench_cluster(args, problems)
    checks = (
        (1000 <= args.records <= 50_000_000, f"--records {args.records}: expected 1000..50000000"),
        (1 <= args.size <= 1 << 20, f"--size {args.size}: expected 1..1048576"),
        (1 <= args.repeat <= 20, f"--repeat {args.repeat}: expected 1..20"),
        (1 <= args.cores <= 64, f"--cores {args.cores}: expected 1..64"),
        (
            1 <= args.entries_per_partition <= 1_000_000,
            f"--entries-per-partition {args.entries_per_partition}: expected 1..1000000",
        ),
        (
            args.region in cluster.topology.region_names,
            f"--region {args.region!r}: expected one of {list(cluster.topology.region_names)}",
        ),
    )
    problems += [message for ok, message in checks if not ok]
    if problems:
        raise ConfigError("bench spark: " + "; ".join(problems))
    check_cluster_ports(cluster, args.use_running)
    workload = SparkWorkload(
        args.records, args.size, args.repeat, args.cores, args.entries_per_partition, args.region
    )

    def progress(line: str) -> None:
        print(f"globelog bench spark: {line}", file=sys.stderr, flush=True)

    async def main() -> str:
        return await on_bench_cluster(
            cluster,
            args.use_running,
            find_tools(),
            progress,
            lambda c: asyncio.to_thread(bench_spark, c, workload, progress),
        )

    print(event_loop.run(main()))
    return 0


async def write_stream(
    cluster: Cluster, namespace: str, stream: str, workload: SparkWorkload
) -> float:
    """Writes the records (distinct payloads) and returns the seconds it took."""
    topology = cluster.topology
    config = LedgerConfig(
        region=workload.region,
        min_regions_for_durability=topology.replication.min_regions_for_durability,
    )
    async with (
        await MetaStore.connect(topology.zk_connect_for(workload.region)) as store,
        await LedgerClient.connect(store, config) as ledgers,
    ):
        streams = StreamMetaStore(store, namespace)
        await streams.create_stream(stream)
        settings = dataclasses.replace(topology.streams, segment_roll_bytes=16 << 20)
        writer = await LogWriter.open(
            streams,
            ledgers,
            stream,
            WriterConfig(
                region=workload.region,
                replication=topology.replication,
                settings=settings,
                owner=f"bench-spark-{uuid.uuid4().hex[:6]}",
            ),
        )
        began = time.perf_counter()
        filler = b"x" * max(0, workload.size - 12)
        for low in range(0, workload.records, BULK):
            high = min(workload.records, low + BULK)
            await writer.write_bulk([b"%012d" % i + filler for i in range(low, high)])
        await writer.close()
        return time.perf_counter() - began


def _touch_every_column(df: Any) -> tuple[int, int]:
    """Records and payload bytes, by an aggregate that reads every column."""
    from pyspark.sql import functions as sf

    row = df.agg(
        sf.count("*").alias("n"),
        sf.sum(sf.length("payload")).alias("bytes"),
        sf.max("dlsn"), sf.sum("segment"), sf.sum("entry"), sf.sum("slot"), sf.sum("txid"),
        sf.sum("seq"), sf.max("writer_region"), sf.max("write_time"), sf.max("producer_id"),
        sf.max("producer_seq"),
    ).collect()[0]  # fmt: skip
    return int(row.n), int(row.bytes)


@dataclass(frozen=True, slots=True)
class ReadFigure:
    name: str
    partitions: int
    seconds: list[float]
    records: int
    payload_bytes: int

    def rate(self) -> tuple[float, float, float]:
        """Median, slowest and fastest records/s."""
        rates = [self.records / s for s in self.seconds]
        return statistics.median(rates), min(rates), max(rates)


def _measure(
    name: str, load: Callable[[], Any], workload: SparkWorkload, progress: Callable[[str], None]
) -> ReadFigure:
    df = load()
    partitions = df.rdd.getNumPartitions()
    _touch_every_column(df)  # warm: Python workers started, classes loaded
    seconds = []
    records = payload = 0
    for i in range(workload.repeat):
        began = time.perf_counter()
        records, payload = _touch_every_column(load())
        seconds.append(time.perf_counter() - began)
        progress(f"{name} read {i + 1}/{workload.repeat}: {records / seconds[-1]:,.0f} rec/s")
    if records != workload.records:
        raise AssertionError(f"{name}: read {records} records; {workload.records} were written")
    return ReadFigure(name, partitions, seconds, records, payload)


def bench_spark(cluster: Cluster, workload: SparkWorkload, progress: Callable[[str], None]) -> str:
    from pipeline import spark_session
    from pipeline.archive import ArchiveJob, archive_stream

    namespace, stream = f"bench{uuid.uuid4().hex[:8]}", "spark-read"
    progress(f"writing {workload.records:,} records of {workload.size} B to {stream!r}")
    write_s = asyncio.run(write_stream(cluster, namespace, stream, workload))
    progress(f"written in {write_s:.1f} s ({workload.records / write_s:,.0f} rec/s)")
    spark = spark_session("globelog-bench-spark", f"local[{workload.cores}]")
    try:
        with tempfile.TemporaryDirectory(prefix="globelog-archive-") as cold:
            job = ArchiveJob(cluster.topology_path, stream, namespace, workload.region, cold)
            began = time.perf_counter()
            archived = archive_stream(spark, job)
            archive_s = time.perf_counter() - began
            progress(f"archived {len(archived)} segments in {archive_s:.1f} s")

            def from_bookies() -> Any:
                return (
                    spark.read.format("globelog")
                    .option("topology", str(cluster.topology_path))
                    .option("namespace", namespace)
                    .option("region", workload.region)
                    .option("stream", stream)
                    .option("entriesPerPartition", str(workload.entries_per_partition))
                    .load()
                )

            def from_parquet() -> Any:
                return spark.read.parquet(*(o.uri for o in archived))

            bookies = _measure("bookies", from_bookies, workload, progress)
            parquet = _measure("parquet", from_parquet, workload, progress)
    finally:
        spark.stop()
    return _table(cluster, workload, write_s, archive_s, [bookies, parquet])


def _table(
    cluster: Cluster,
    workload: SparkWorkload,
    write_s: float,
    archive_s: float,
    figures: list[ReadFigure],
) -> str:
    r = cluster.topology.replication
    lines = [
        f"== globelog bench spark: {workload.records:,} records x {workload.size} B, Spark "
        f"local[{workload.cores}] on this machine's cores, reads in {workload.region}",
        f"   cluster: {cluster.profile} WAN profile, E/W/A {r.ensemble_size}/{r.write_quorum}/"
        f"{r.ack_quorum}, bookies journal fsync on; the same aggregate over every column, "
        f"{workload.repeat} timed runs after one warm-up",
        f"   written in {write_s:.1f} s; archived to Parquet (zstd) in {archive_s:.1f} s",
        f"   {'source':<10} {'partitions':>10} {'median rec/s':>13} {'min':>10} {'max':>10} "
        f"{'MB/s':>7}",
    ]
    for f in figures:
        median, low, high = f.rate()
        mb_s = median * (f.payload_bytes / f.records) / 1e6
        lines.append(
            f"   {f.name:<10} {f.partitions:>10} {median:>13,.0f} {low:>10,.0f} {high:>10,.0f} "
            f"{mb_s:>7.1f}"
        )
    ratio = figures[0].rate()[0] / figures[1].rate()[0]
    lines.append(f"   bookies / parquet: {ratio:.2f}x (target >= 0.5x)")
    return "\n".join(lines)
