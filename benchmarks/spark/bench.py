"""`globelog bench spark`: the `globelog` data source's read throughput from the bookies,
against Spark reading the same records from their Parquet archive (the scan it should come
close to), in one local SparkSession on the same cores.

The stream is written once (library writer, bulk), archived with the archive job, then each
read runs the same aggregate touching every column, `--repeat` times, the sources' reads taken
in turn so that none meets a colder JVM than another; the table shows the median and spread
of records/s and MB/s, the partition count, the cores and the CPU each part spent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    add_cluster_arguments,
    bench_cluster,
    bench_progress,
    check_cluster_ports,
    run_on_bench_cluster,
)
from core.errors import ConfigError
from global_meta import MetaStore
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient, LedgerConfig
from localcluster.controller import Cluster
from localcluster.processes import cpu_seconds, descendants, load_state
from localcluster.tools import find_tools
from pipeline.options import ENTRIES_PER_PARTITION
from reader.session import read_session
from writer.admin import apply_retention
from writer.log_writer import LogWriter, WriterConfig

BULK = 1000  # records per write_bulk


@dataclass(frozen=True, slots=True)
class SparkWorkload:
    records: int
    size: int
    repeat: int
    size_spread: int  # payloads of size ± this many bytes, spread evenly
    cores: int
    entries_per_partition: int
    region: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per record")
    parser.add_argument(
        "--size-spread",
        type=int,
        default=0,
        help="payloads of --size ± this many bytes (records of one length are decoded without "
        "a Python step per record; of many lengths, with one)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="reads of each kind")
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--entries-per-partition", type=int, default=ENTRIES_PER_PARTITION)
    parser.add_argument("--region", default="us-east", help="where the writer and readers run")


def run(args: argparse.Namespace) -> int:
    problems: list[str] = []
    cluster = bench_cluster(args, problems)
    checks = (
        (1000 <= args.records <= 50_000_000, f"--records {args.records}: expected 1000..50000000"),
        (12 <= args.size <= 65536, f"--size {args.size}: expected 12..65536"),
        (
            0 <= args.size_spread <= args.size - 12,
            f"--size-spread {args.size_spread}: expected 0..{args.size - 12} (--size - 12)",
        ),
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
        args.records,
        args.size,
        args.repeat,
        args.size_spread,
        args.cores,
        args.entries_per_partition,
        args.region,
    )

    progress = bench_progress("spark")
    run_on_bench_cluster(
        cluster,
        args.use_running,
        find_tools(),
        progress,
        lambda c: asyncio.to_thread(bench_spark, c, workload, progress),
    )
    return 0


async def write_stream(
    cluster: Cluster, namespace: str, stream: str, workload: SparkWorkload
) -> float:
    """Writes the records (distinct payloads) and returns the seconds it took."""
    topology = cluster.topology
    config = LedgerConfig.of(topology, workload.region)
    async with (
        await MetaStore.of(topology, workload.region) as store,
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
        noise = random.Random(7).randbytes(1 << 20)  # incompressible, as most payloads are
        for low in range(0, workload.records, BULK):
            high = min(workload.records, low + BULK)
            await writer.write_bulk(
                [
                    b"%012d" % i + _slice(noise, i * 7919, _tail(workload, i))
                    for i in range(low, high)
                ]
            )
        await writer.close()
        return time.perf_counter() - began


def _tail(workload: SparkWorkload, i: int) -> int:
    """Record i's payload bytes after its 12-digit number."""
    spread = workload.size_spread
    return workload.size - 12 + (i * 7919) % (2 * spread + 1) - spread


def _slice(noise: bytes, at: int, size: int) -> bytes:
    at %= len(noise) - size
    return noise[at : at + size]


@dataclass(frozen=True, slots=True)
class ReadFigure:
    name: str
    partitions: int
    seconds: list[float]
    records: int
    payload_bytes: int
    cpu: CpuSplit  # CPU seconds per million records read

    def rate(self) -> tuple[float, float, float]:
        """Median, slowest and fastest records/s."""
        rates = [self.records / s for s in self.seconds]
        return statistics.median(rates), min(rates), max(rates)


@dataclass(frozen=True, slots=True)
class CpuSplit:
    """CPU seconds: Spark's JVM, its Python workers, bookies."""

    spark_jvm: float
    python_workers: float
    bookies: float

    def __sub__(self, other: CpuSplit) -> CpuSplit:
        return CpuSplit(
            self.spark_jvm - other.spark_jvm,
            self.python_workers - other.python_workers,
            self.bookies - other.bookies,
        )

    def __add__(self, other: CpuSplit) -> CpuSplit:
        return CpuSplit(
            self.spark_jvm + other.spark_jvm,
            self.python_workers + other.python_workers,
            self.bookies + other.bookies,
        )

    def per_million(self, records: int) -> CpuSplit:
        scale = 1e6 / records
        return CpuSplit(self.spark_jvm * scale, self.python_workers * scale, self.bookies * scale)


class CpuMeter:
    def __init__(self, cluster: Cluster) -> None:
        self.bookies = [r.pid for r in load_state(cluster.data_dir).values() if r.kind == "bookie"]

    def sample(self) -> CpuSplit:
        jvm = workers = 0.0
        for pid in descendants(os.getpid()):
            with contextlib.suppress(OSError):  # a worker that ended meanwhile
                name = Path(f"/proc/{pid}/comm").read_text().strip()
                used = cpu_seconds(pid, children=True)
                if name == "java":
                    jvm += used
                elif name.startswith("python"):
                    workers += used
        bookies = 0.0
        for pid in self.bookies:
            with contextlib.suppress(OSError):
                bookies += cpu_seconds(pid)
        return CpuSplit(jvm, workers, bookies)


def _measure(
    sources: dict[str, Callable[[], Any]],
    workload: SparkWorkload,
    meter: CpuMeter,
    progress: Callable[[str], None],
) -> list[ReadFigure]:
    """The sources' reads, interleaved (benchmarks.spark.sources.interleaved_reads), as figures."""
    from benchmarks.spark.sources import TimedSource, interleaved_reads

    timed = [TimedSource(name, load) for name, load in sources.items()]
    interleaved_reads(timed, workload.repeat, meter.sample, progress)
    figures = []
    for t in timed:
        if t.records != workload.records:
            raise AssertionError(f"{t.name}: read {t.records} records; {workload.records} written")
        cpu = t.measured.per_million(workload.records * workload.repeat)
        figures.append(ReadFigure(t.name, t.partitions, t.seconds, t.records, t.payload, cpu))
    return figures


def bench_spark(cluster: Cluster, workload: SparkWorkload, progress: Callable[[str], None]) -> str:
    from benchmarks.spark.sources import CeilingSource
    from pipeline import spark_session
    from pipeline.archive import ArchiveJob, archive_stream

    namespace, stream = f"bench{uuid.uuid4().hex[:8]}", "spark-read"
    progress(f"writing {workload.records:,} records of {workload.size} B to {stream!r}")
    write_s = asyncio.run(write_stream(cluster, namespace, stream, workload))
    progress(f"written in {write_s:.1f} s ({workload.records / write_s:,.0f} rec/s)")
    meter = CpuMeter(cluster)
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

            def ceiling() -> Any:
                return (
                    spark.read.format(CeilingSource.name())
                    .option("rows", str(workload.records))
                    .option("size", str(workload.size))
                    .option("partitions", str(partitions))
                    .load()
                )

            spark.dataSource.register(CeilingSource)
            partitions = from_bookies().rdd.getNumPartitions()  # the no-work source's too
            bookies, parquet, api = _measure(
                {"bookies": from_bookies, "parquet": from_parquet, "api-limit": ceiling},
                workload,
                meter,
                progress,
            )
            deleted = asyncio.run(_expire(cluster, namespace, stream, workload.region))
            progress(f"retention deleted {deleted} archived ledgers: reads now use the archive")
            (tiered,) = _measure({"archived": from_bookies}, workload, meter, progress)
    finally:
        spark.stop()
    return _table(cluster, workload, write_s, archive_s, [bookies, parquet, tiered, api])


async def _expire(cluster: Cluster, namespace: str, stream: str, region: str) -> int:
    """Deletes the ledgers of every archived segment (retention with a TTL of 1 ms)."""
    async with read_session(cluster.topology, region, namespace) as session:
        result = await apply_retention(
            session.streams, session.ledgers, stream, 0.001, archive_required=True
        )
    return len(result.expired)


def _table(
    cluster: Cluster,
    workload: SparkWorkload,
    write_s: float,
    archive_s: float,
    figures: list[ReadFigure],
) -> str:
    r = cluster.topology.replication
    lines = [
        f"== globelog bench spark: {workload.records:,} records x {workload.size}"
        f"{f'±{workload.size_spread}' if workload.size_spread else ''} B, Spark "
        f"local[{workload.cores}] on this machine's cores, reads in {workload.region}",
        f"   cluster: {cluster.profile} WAN profile, E/W/A {r.ensemble_size}/{r.write_quorum}/"
        f"{r.ack_quorum}, bookies journal fsync on; the same aggregate over every column, "
        f"one warm-up read of each source, then {workload.repeat} rounds of one read of each "
        "in turn (the JVM equally warm for all)",
        f"   written in {write_s:.1f} s; archived to Parquet (zstd) in {archive_s:.1f} s",
        f"   {'source':<10} {'partitions':>10} {'median rec/s':>13} {'min':>10} {'max':>10} "
        f"{'MB/s':>7}   CPU s per 1M records: {'spark JVM':>9} {'py workers':>10} {'bookies':>7}",
    ]
    for f in figures:
        median, low, high = f.rate()
        mb_s = median * (f.payload_bytes / f.records) / 1e6
        lines.append(
            f"   {f.name:<10} {f.partitions:>10} {median:>13,.0f} {low:>10,.0f} {high:>10,.0f} "
            f"{mb_s:>7.1f}   {'':>21} {f.cpu.spark_jvm:>9.2f} {f.cpu.python_workers:>10.2f} "
            f"{f.cpu.bookies:>7.2f}"
        )
    bookies, parquet, tiered, api = (f.rate()[0] for f in figures)
    lines.append(
        f"   bookies / parquet: {bookies / parquet:.2f}x (target >= 0.5x); "
        f"api-limit / parquet: {api / parquet:.2f}x; bookies / api-limit: {bookies / api:.2f}x; "
        f"bookies / archived: {bookies / tiered:.2f}x"
    )
    lines.append(
        "   (archived: the data source again after retention deleted the ledgers, reading the "
        "Parquet copies with pyarrow; api-limit: a Python data source yielding prebuilt Arrow "
        "batches of the same shape, the fastest any Python data source reads here)"
    )
    return "\n".join(lines)
