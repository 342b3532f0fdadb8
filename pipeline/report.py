"""The delivery report, an example Spark job over a globelog stream (`globelog spark report`).

Two inputs:
- *reader observations*: for `observe_s` seconds, one tailing reader per region (the library
  reader, through that region's ZooKeeper node and its own bookies first) notes when each new
  record reached it. A record's delivery lag in a region is that time minus the record's write
  timestamp (the writer's clock when it sealed the entry; one machine's clock in a local
  cluster, NTP-synchronised hosts otherwise).
- *the stream, rewound by time*: the `globelog` data source reads every record written in the
  last `since_s` seconds (startingTime), from the bookies, in parallel.
Spark computes the lag percentiles per region from the first and the per-minute throughput
(records and payload bytes, by writer region) from the second.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from core.errors import ConfigError, ReadTimeoutError
from core.topology import Topology
from core.topology_loader import load_topology
from pipeline.streaming import available_end
from reader.log_reader import LogReader, ReaderConfig
from reader.positions import By, Position
from reader.session import read_session

Observation = tuple[str, int, int, int]  # region, seq, write time (ms), observed (ms)
PERCENTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True, slots=True)
class ReportJob:
    topology_path: Path
    stream: str
    namespace: str = "default"
    since_s: float = 900.0  # rewind this far for the throughput
    observe_s: float = 20.0  # watch live deliveries this long (0: no lag figures)
    regions: tuple[str, ...] = ()  # default: every region of the topology


@dataclass(frozen=True, slots=True)
class RegionLag:
    region: str
    records: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True, slots=True)
class MinuteRate:
    minute: datetime
    writer_region: str
    records: int
    payload_bytes: int


@dataclass(frozen=True, slots=True)
class DeliveryReport:
    stream: str
    since: datetime
    observed_s: float
    lags: list[RegionLag] = field(default_factory=list)
    minutes: list[MinuteRate] = field(default_factory=list)
    lag_points: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


async def observe(
    job: ReportJob, regions: tuple[str, ...], watching: Callable[[], None] = lambda: None
) -> list[Observation]:
    """Tails the stream from its end in every region for `observe_s` seconds, from the moment
    every region's reader is open (then `watching` is called)."""
    topology = load_topology(job.topology_path)
    async with contextlib.AsyncExitStack() as stack:
        readers = await asyncio.gather(
            *(_open_tail(stack, job, topology, region) for region in regions)
        )
        watching()
        deadline = time.monotonic() + job.observe_s
        found = await asyncio.gather(
            *(
                _tail(reader, region, deadline)
                for reader, region in zip(readers, regions, strict=True)
            )
        )
    return [o for region in found for o in region]


async def _open_tail(
    stack: contextlib.AsyncExitStack, job: ReportJob, topology: Topology, region: str
) -> LogReader:
    session = await stack.enter_async_context(read_session(topology, region, job.namespace))
    end = await available_end(session, job.stream)
    reader = await LogReader.open(
        session.streams, session.ledgers, job.stream, Position(By.DLSN, end), ReaderConfig()
    )
    stack.push_async_callback(reader.close)
    return reader


async def _tail(reader: LogReader, region: str, deadline: float) -> list[Observation]:
    seen: list[Observation] = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            record = await reader.read_next(timeout_s=left)
        except ReadTimeoutError:
            break
        if record is None:
            break
        seen.append((region, record.seq, record.write_time_ms, _now_ms()))
    return seen


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def delivery_report(
    spark: SparkSession,
    job: ReportJob,
    progress: Callable[[str], None] = lambda _: None,
    watching: Callable[[], None] = lambda: None,
) -> DeliveryReport:
    """Observes, rewinds and computes; `watching` is called once every region's reader is
    open (records written from then on are observed everywhere)."""
    topology = load_topology(job.topology_path)
    regions = job.regions or topology.region_names
    unknown = sorted(set(regions) - set(topology.region_names))
    if unknown:
        raise ConfigError(f"regions {unknown}: expected some of {list(topology.region_names)}")
    if job.since_s <= 0 or job.observe_s < 0:
        raise ConfigError(
            f"since {job.since_s} s, observe {job.observe_s} s: expected since > 0, observe >= 0"
        )
    since_ms = _now_ms() - int(job.since_s * 1000)
    observations: list[Observation] = []
    if job.observe_s > 0:
        progress(f"observing deliveries of {job.stream!r} in {', '.join(regions)} "
                 f"for {job.observe_s:g} s")  # fmt: skip
        observations = asyncio.run(observe(job, tuple(regions), watching))
        progress(f"observed {len(observations)} deliveries")
    progress(f"reading {job.stream!r} from {datetime.fromtimestamp(since_ms / 1000)} with Spark")
    records = (
        spark.read.format("globelog")
        .option("topology", str(job.topology_path))
        .option("namespace", job.namespace)
        .option("region", regions[0])
        .option("stream", job.stream)
        .option("startingTime", str(since_ms))
        .load()
    )
    per_minute = (
        records.groupBy(sf.window("write_time", "1 minute").start.alias("minute"), "writer_region")
        .agg(sf.count("*").alias("n"), sf.sum(sf.length("payload")).alias("bytes"))
        .orderBy("minute", "writer_region")
        .collect()
    )
    minutes = [
        MinuteRate(r.minute, r.writer_region, int(r.n), int(r.bytes or 0)) for r in per_minute
    ]
    lags: list[RegionLag] = []
    points: dict[str, list[tuple[float, float]]] = {}
    if observations:
        seen = spark.createDataFrame(
            observations, "region string, seq long, write_ms long, observed_ms long"
        ).withColumn("lag_ms", sf.col("observed_ms") - sf.col("write_ms"))
        rows = (
            seen.groupBy("region")
            .agg(
                sf.count("*").alias("n"),
                sf.percentile_approx("lag_ms", list(PERCENTILES), 10_000).alias("p"),
                sf.max("lag_ms").alias("top"),
            )
            .collect()
        )
        by_region = {r.region: r for r in rows}
        lags = [
            RegionLag(region, int(r.n), float(r.p[0]), float(r.p[1]), float(r.p[2]), float(r.top))
            for region in regions
            if (r := by_region.get(region)) is not None
        ]
        start = min(o[3] for o in observations)
        for region, _, written, observed in observations:
            points.setdefault(region, []).append(((observed - start) / 1000, observed - written))
    since = datetime.fromtimestamp(since_ms / 1000)
    return DeliveryReport(job.stream, since, job.observe_s, lags, minutes, points)


def report_json(report: DeliveryReport, plot: Path) -> dict[str, Any]:
    return {
        "stream": report.stream,
        "since": report.since.isoformat(),
        "observed_s": report.observed_s,
        "delivery_lag_ms": [
            {
                "region": lag.region,
                "records": lag.records,
                "p50": lag.p50_ms,
                "p90": lag.p90_ms,
                "p99": lag.p99_ms,
                "max": lag.max_ms,
            }
            for lag in report.lags
        ],
        "per_minute": [
            {
                "minute": m.minute.isoformat(),
                "writer_region": m.writer_region,
                "records": m.records,
                "payload_bytes": m.payload_bytes,
            }
            for m in report.minutes
        ],
        "plot": str(plot),
    }


def report_text(report: DeliveryReport, plot: Path | None = None) -> str:
    lines = [f"== delivery report: stream {report.stream!r} since {report.since:%Y-%m-%d %H:%M:%S}"]
    lines += _lag_lines(report)
    lines.append("throughput per minute (by write timestamp and writer region):")
    if not report.minutes:
        lines.append("  no record in the window")
    for minute in report.minutes:
        lines.append(
            f"  {minute.minute:%H:%M}  {minute.writer_region:<10} {minute.records:>9} records "
            f"{minute.payload_bytes / 1e6:>9.2f} MB  ({minute.records / 60:,.1f} rec/s)"
        )
    if plot is not None:
        lines.append(f"plot: {plot}")
    return "\n".join(lines)


def _lag_lines(report: DeliveryReport) -> list[str]:
    if report.observed_s <= 0:
        return ["delivery lag: not observed (--observe 0)"]
    lines = [
        f"delivery lag (write timestamp -> a tailing reader in the region, "
        f"{report.observed_s:g} s observed):"
    ]
    if not report.lags:
        return [*lines, "  no record was written while the readers watched: no lag figures"]
    lines.append(
        f"  {'region':<10} {'records':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}"
    )
    for lag in report.lags:
        lines.append(
            f"  {lag.region:<10} {lag.records:>8} {lag.p50_ms:>8.1f} {lag.p90_ms:>8.1f} "
            f"{lag.p99_ms:>8.1f} {lag.max_ms:>8.1f}"
        )
    return lines
