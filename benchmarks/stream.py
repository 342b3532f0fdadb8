"""`globelog bench stream`: stream write throughput and commit latency, and tailing reads.

Runs, one after the other, each on a new stream of the same cluster (one client process
holds the writer and the readers; the cluster runs on the same cores):
  1. the ledger baseline: one add at a time on a bare ledger (E/W/A from the topology);
  2. commit latency: one record at a time through a LogWriter (immediate transmit), to set
     beside run 1's add latency;
  3. throughput: records of each size, immediate and batched transmit, a window of writes
     outstanding, for `--seconds` each; commit latency is from `write_nowait` to its ack;
  4. tailing: a writer paced at `--tail-rate` records/s in the client's region and a reader
     in another region; end-to-end latency from `write_nowait` to the reader's delivery, then
     the same reader's catch-up throughput over the whole stream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.ledger import fsync_policy
from core.records import Record
from core.streams import StreamSettings, TransmitPolicy
from figures.percentiles import percentile
from figures.plots import latency_over_time
from localcluster.controller import Cluster
from reader.log_reader import LogReader, ReaderConfig
from reader.positions import Position
from region.connections import Session, session
from writer.events import Written
from writer.log_writer import LogWriter, WriterConfig

Progress = Callable[[str], None]
LATENCY_SAMPLES = 300  # one-at-a-time writes and adds per latency run
WINDOW = {TransmitPolicy.IMMEDIATE: 512, TransmitPolicy.SIZE: 20_000}
BULK_RECORDS = 1000  # records per write_bulk call
BULK_CALLS_OUTSTANDING = 20
DRAIN_S = 60.0


RUNS = frozenset({"commit", "immediate", "batched", "bulk", "tail"})
POLICY_RUNS = {TransmitPolicy.IMMEDIATE: "immediate", TransmitPolicy.SIZE: "batched"}


@dataclass(frozen=True, slots=True)
class StreamWorkload:
    region: str
    reader_region: str
    seconds: float
    record_sizes: tuple[int, ...] = (100, 1024)
    tail_rate: int = 2000  # records/s of the paced writer in the tailing run
    tail_seconds: float = 5.0
    plot: Path | None = None  # a PNG of delivery and commit latency over time
    runs: frozenset[str] = RUNS  # which of RUNS to run


@dataclass(frozen=True, slots=True)
class Figures:
    label: str
    records: int
    elapsed_s: float
    latencies_ms: tuple[float, ...]

    def row(self) -> str:
        ordered = sorted(self.latencies_ms)
        rate = self.records / self.elapsed_s
        return (
            f"  {self.label:<44} {rate:>10,.0f} {percentile(ordered, 50):>8.2f} "
            f"{percentile(ordered, 99):>8.2f} {ordered[-1]:>8.1f}"
        )

    def p50_ms(self) -> float:
        return percentile(sorted(self.latencies_ms), 50)

    def percentile_ms(self, p: float) -> float:
        return percentile(sorted(self.latencies_ms), p)


HEADER = f"  {'run':<44} {'records/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"


async def bench_stream(cluster: Cluster, workload: StreamWorkload, progress: Progress) -> str:
    topology = cluster.topology
    rep = topology.replication
    lines = [
        f"globelog bench stream: topology {topology.name}, WAN profile {cluster.profile}, "
        f"E/W/A {rep.ensemble_size}/{rep.write_quorum}/{rep.ack_quorum}, "
        f"min_regions_for_durability={rep.min_regions_for_durability}",
        f"process layout: one client process (writer in {workload.region}, tailing reader in "
        f"{workload.reader_region}); {len(topology.bookies)} bookies, "
        f"{len(topology.zookeeper)} ZooKeeper nodes and toxiproxy on the same machine",
        f"fsync: {fsync_policy(cluster)}",
        "",
        HEADER,
    ]
    namespace = f"bench{uuid.uuid4().hex[:6]}"
    async with (
        session(topology, workload.region, namespace) as s,
        session(topology, workload.reader_region, namespace) as remote,
    ):
        runs = workload.runs
        base = one = tail = None
        if "commit" in runs:
            progress("run 1: ledger adds one at a time (baseline)")
            base = await _ledger_baseline(s)
            lines.append(base.row())
            progress("run 2: stream commit latency, one record at a time")
            one = await one_at_a_time(s)
            lines.append(one.row())
        for size in workload.record_sizes:
            for policy in (TransmitPolicy.IMMEDIATE, TransmitPolicy.SIZE):
                if POLICY_RUNS[policy] in runs:
                    progress(
                        f"run 3: {size} B records, {policy.value} transmit, {workload.seconds} s"
                    )
                    lines.append((await throughput(s, size, policy, workload.seconds)).row())
            if "bulk" in runs:
                progress(
                    f"run 3: {size} B records, write_bulk of {BULK_RECORDS}, {workload.seconds} s"
                )
                lines.append((await _bulk_throughput(s, size, workload.seconds)).row())
        if "tail" in runs:
            progress(
                f"run 4: tailing from {workload.reader_region} at {workload.tail_rate} records/s"
            )
            tail, catch_up = await tailing(s, remote, workload)
            lines += [tail.row(), catch_up.row()]
    lines.append("")
    if base is not None and one is not None:
        gap = one.p50_ms() - base.p50_ms()
        lines.append(
            f"commit p50 - ledger add p50 = {gap:+.2f} ms (records one at a time, same profile)"
        )
        if workload.plot is not None and tail is not None:
            _plot(workload, cluster.profile, tail, one)
            lines.append(f"plot: {workload.plot}")
    lines.append(
        "batched = size transmit policy: 64 KiB buffer, 2 ms flush SLA; immediate = one entry "
        "per write; throughput runs keep a window of writes outstanding "
        f"({WINDOW[TransmitPolicy.IMMEDIATE]} immediate, {WINDOW[TransmitPolicy.SIZE]} batched); "
        f"write_bulk: {BULK_CALLS_OUTSTANDING} calls of {BULK_RECORDS} records outstanding"
    )
    return "\n".join(lines)


def _writer_config(s: Session, **settings: object) -> WriterConfig:
    base = dataclasses.replace(StreamSettings(), **settings)  # type: ignore[arg-type]
    return WriterConfig(region=s.region, replication=s.topology.replication, settings=base)


async def _open(s: Session, **settings: object) -> tuple[str, LogWriter]:
    stream = f"s{uuid.uuid4().hex[:8]}"
    await s.streams.create_stream(stream)
    return stream, await LogWriter.open(s.streams, s.ledgers, stream, _writer_config(s, **settings))


async def _ledger_baseline(s: Session) -> Figures:
    writer = await s.ledgers.create(s.topology.replication, b"bench")
    latencies = []
    payload = b"x" * 100
    started = time.perf_counter()
    for _ in range(LATENCY_SAMPLES):
        sent = time.perf_counter()
        await writer.add(payload)
        latencies.append((time.perf_counter() - sent) * 1000)
    elapsed = time.perf_counter() - started
    await writer.close()
    await s.ledgers.delete(writer.ledger_id)
    return Figures("ledger add, 100 B, one at a time", LATENCY_SAMPLES, elapsed, tuple(latencies))


async def one_at_a_time(s: Session) -> Figures:
    _, writer = await _open(s, transmit=TransmitPolicy.IMMEDIATE)
    latencies = []
    payload = b"x" * 100
    started = time.perf_counter()
    for _ in range(LATENCY_SAMPLES):
        sent = time.perf_counter()
        await writer.write(Record(payload))
        latencies.append((time.perf_counter() - sent) * 1000)
    elapsed = time.perf_counter() - started
    await writer.close()
    return Figures(
        "stream commit, 100 B, one at a time", LATENCY_SAMPLES, elapsed, tuple(latencies)
    )


async def throughput(s: Session, size: int, policy: TransmitPolicy, seconds: float) -> Figures:
    settings: dict[str, object] = {"transmit": policy}
    if policy is TransmitPolicy.SIZE:
        settings |= {"buffer_bytes": 64 * 1024, "flush_sla_s": 0.002}
    settings["pending_writes_max"] = WINDOW[policy]  # the writer's own backpressure
    _, writer = await _open(s, **settings)
    latencies: list[float] = []
    record = Record(b"x" * size)
    perf = time.perf_counter
    last: asyncio.Future[Written] | None = None

    def acked(sent: float, future: asyncio.Future[Written]) -> None:
        if not future.cancelled() and future.exception() is None:
            latencies.append((perf() - sent) * 1000)

    started = perf()
    deadline = started + seconds
    while perf() < deadline:
        await writer.wait_for_room()
        room = WINDOW[policy] - writer.pending_writes
        for _ in range(min(100, room)):  # the clock and the room every 100 writes at most
            last = writer.write_nowait(record)
            last.add_done_callback(functools.partial(acked, perf()))
    writer.flush()
    if last is not None:
        async with asyncio.timeout(DRAIN_S):
            await last
    elapsed = perf() - started
    await writer.close()
    label = f"write {size} B, {'batched' if policy is TransmitPolicy.SIZE else 'immediate'}"
    return Figures(label, len(latencies), elapsed, tuple(latencies))


async def _bulk_throughput(s: Session, size: int, seconds: float) -> Figures:
    """write_bulk calls of BULK_RECORDS records, BULK_CALLS_OUTSTANDING of them at once;
    the latency is each call's, from the call to its last record's acknowledgement."""
    _, writer = await _open(
        s, transmit=TransmitPolicy.SIZE, buffer_bytes=64 * 1024, flush_sla_s=0.002
    )
    chunk = [b"x" * size] * BULK_RECORDS  # bytes: records whose txids the writer assigns
    perf = time.perf_counter
    latencies: list[float] = []
    outstanding: deque[tuple[float, asyncio.Task[list[Written]]]] = deque()
    records = 0

    async def settle_oldest() -> None:
        nonlocal records
        sent, task = outstanding.popleft()
        records += len(await task)
        latencies.append((perf() - sent) * 1000)

    started = perf()
    deadline = started + seconds
    while perf() < deadline:
        if len(outstanding) >= BULK_CALLS_OUTSTANDING:
            await settle_oldest()
        outstanding.append((perf(), asyncio.ensure_future(writer.write_bulk(chunk))))
        await asyncio.sleep(0)  # let the call start before the next one
    async with asyncio.timeout(DRAIN_S):
        while outstanding:
            await settle_oldest()
    elapsed = perf() - started
    await writer.close()
    return Figures(
        f"write_bulk {size} B x {BULK_RECORDS} (latency per call)",
        records,
        elapsed,
        tuple(latencies),
    )


def _plot(workload: StreamWorkload, profile: str, tail: Figures, one: Figures) -> None:
    assert workload.plot is not None
    tail_at = [i / workload.tail_rate for i in range(len(tail.latencies_ms))]
    one_at = list(itertools.accumulate(ms / 1000 for ms in one.latencies_ms))
    latency_over_time(
        workload.plot,
        f"globelog bench stream (WAN profile {profile}): latency of each record over time",
        {
            f"writer {workload.region} -> reader {workload.reader_region}, "
            f"{workload.tail_rate}/s paced": (tail_at, tail.latencies_ms),
            f"commit in {workload.region}, one record at a time": (one_at, one.latencies_ms),
        },
    )


async def tailing(s: Session, remote: Session, workload: StreamWorkload) -> tuple[Figures, Figures]:
    stream, writer = await _open(
        s, transmit=TransmitPolicy.SIZE, buffer_bytes=16 * 1024, flush_sla_s=0.002
    )
    reader = await LogReader.open(remote.streams, remote.ledgers, stream, Position.earliest())
    sent_at: dict[int, float] = {}
    delivered: list[float] = []
    total = int(workload.tail_rate * workload.tail_seconds)
    perf = time.perf_counter

    async def consume() -> None:
        for _ in range(total):
            record = await reader.read_next(timeout_s=DRAIN_S)
            assert record is not None
            delivered.append((perf() - sent_at[record.seq]) * 1000)

    consumer = asyncio.create_task(consume())
    started = perf()
    for index in range(total):
        target = started + index / workload.tail_rate
        if (wait := target - perf()) > 0:
            await asyncio.sleep(wait)
        future = writer.write_nowait(Record(index.to_bytes(8, "big") + b"x" * 92))
        sent_at[index] = perf()
        del future
    async with asyncio.timeout(DRAIN_S):
        await consumer
    elapsed = perf() - started
    await reader.close()
    await writer.close()
    tail = Figures(
        f"tail 100 B in {remote.region}: write -> read, paced", total, elapsed, tuple(delivered)
    )
    catch_up_reader = await LogReader.open(
        remote.streams, remote.ledgers, stream, Position.earliest(), ReaderConfig(follow=False)
    )
    begun = perf()
    gaps = []
    last = begun
    count = 0
    async with catch_up_reader:
        async for _ in catch_up_reader:
            now = perf()
            gaps.append((now - last) * 1000)
            last = now
            count += 1
    catch_up = Figures(
        f"catch-up read in {remote.region} (gap per record)", count, perf() - begun, tuple(gaps)
    )
    return tail, catch_up
