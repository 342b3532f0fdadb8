"""`globelog bench reads`: catch-up reads of one closed ledger, beside BookKeeper's own Java
client reading the same ledger from the same bookies.

globelog writes one ledger (E/W/A 3/3/2, CRC32, BookKeeper's benchmark password) and closes
it. Then each reader reads it from the first entry to the last, one read call at a time of
`--batch-entries` entries: globelog with batched reads (`LedgerReader.read_entries`, up to 512
entries a request, four requests in flight) and with single reads (the per-entry path, 64 in
flight); the Java client (benchmarks/java/ReadBench.java) with `batchReadEntries` (v2, its
batched read) and with `readEntries` (v3, every entry of a call its own request, all sent at
once). Both dial bookie ids: no WAN proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import (
    add_cluster_arguments,
    bench_cluster,
    bench_progress,
    check_cluster_ports,
    run_on_bench_cluster,
)
from benchmarks.java_runner import JAVA_HEAP, children_cpu_s, run_jvm
from core.errors import ClusterError, ConfigError
from core.routes import TOPOLOGY_ZNODE, decode_published
from core.topology import Replication, Topology
from global_meta import MetaStore
from ledger import BookieClient, DigestType, LedgerClient, LedgerConfig
from localcluster import nodes
from localcluster.controller import Cluster
from localcluster.probes import log_tail
from localcluster.tools import Tools, find_tools

# globelog's own Java reader (BookKeeper's BenchReadThroughputLatency tails ledgers being
# written; on a closed one its 4.17.3 batch mode never ends and its single mode times nothing)
JAVA_READ_BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "java" / "ReadBench.java"
JAVA_PASSWORD = b"benchPasswd"  # BookKeeper's benchmarks' password
JAVA_READ_TIMEOUT_S = 300.0
WRITE_WINDOW = 256  # adds outstanding while the ledger is written
REPLICATION = Replication(3, 3, 2, 2)
_JAVA_READ = re.compile(r"^READ (\d+) (\d+) (\d+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ReadWorkload:
    region: str
    entries: int
    entry_bytes: int
    batch_entries: int  # entries per read call
    repeat: int


@dataclass(frozen=True, slots=True)
class ReadRun:
    reader: str
    entries: int
    seconds: float
    cpu_s: float  # the reader's process CPU over the read (the JVM's whole life for Java)

    @property
    def per_s(self) -> float:
        return self.entries / self.seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument("--region", default="us-east", help="where the globelog client runs")
    parser.add_argument("--entries", type=int, default=100_000, help="entries in the ledger")
    parser.add_argument("--entry-bytes", type=int, default=1024)
    parser.add_argument("--batch-entries", type=int, default=1000, help="entries per read call")
    parser.add_argument("--repeat", type=int, default=3, help="reads of each kind")


def run(args: argparse.Namespace) -> int:
    problems: list[str] = []
    cluster = bench_cluster(args, problems)
    checks = (
        (1000 <= args.entries <= 10_000_000, f"--entries {args.entries}: expected 1000..10000000"),
        (
            1 <= args.entry_bytes <= 1 << 20,
            f"--entry-bytes {args.entry_bytes}: expected 1..1048576",
        ),
        (
            1 <= args.batch_entries <= 100_000,
            f"--batch-entries {args.batch_entries}: expected 1..100000",
        ),
        (1 <= args.repeat <= 20, f"--repeat {args.repeat}: expected 1..20"),
    )
    problems += [message for ok, message in checks if not ok]
    if problems:
        raise ConfigError("bench reads: " + "; ".join(problems))
    check_cluster_ports(cluster, args.use_running)
    workload = ReadWorkload(
        args.region, args.entries, args.entry_bytes, args.batch_entries, args.repeat
    )
    tools = find_tools()
    progress = bench_progress("reads")
    run_on_bench_cluster(
        cluster,
        args.use_running,
        tools,
        progress,
        lambda c: bench_reads(c, workload, tools, progress),
    )
    return 0


async def bench_reads(
    cluster: Cluster, workload: ReadWorkload, tools: Tools, progress: Callable[[str], None]
) -> str:
    topology = cluster.topology
    async with await MetaStore.of(topology, workload.region) as store:
        writer_client = await _direct_client(store, topology, workload.region, batch_reads=True)
        async with writer_client:
            ledger_id = await _write_ledger(writer_client, workload)
        progress(
            f"wrote ledger {ledger_id}: {workload.entries} entries of {workload.entry_bytes} B"
        )
        runs: list[ReadRun] = []
        try:
            for repeat in range(workload.repeat):
                for batch_reads in (True, False):
                    run = await _globelog_read(store, topology, workload, ledger_id, batch_reads)
                    progress(
                        f"{run.reader} {repeat + 1}/{workload.repeat}: {run.per_s:,.0f} entries/s"
                    )
                    runs.append(run)
                for batch in (True, False):
                    run = await _java_read(tools, cluster, workload, ledger_id, batch)
                    progress(
                        f"{run.reader} {repeat + 1}/{workload.repeat}: {run.per_s:,.0f} entries/s"
                    )
                    runs.append(run)
        finally:
            async with await _direct_client(
                store, topology, workload.region, batch_reads=True
            ) as client:
                await client.delete(ledger_id)
    return _report(cluster, workload, runs)


async def _direct_client(
    store: MetaStore, topology: Topology, region: str, *, batch_reads: bool
) -> LedgerClient:
    """A client that dials bookie ids (no WAN route), as the Java benchmark does."""
    config = LedgerConfig.of(
        topology,
        region,
        digest_type=DigestType.CRC32,
        min_regions_for_durability=2,
        batch_reads=batch_reads,
    )
    data, _ = await store.get(TOPOLOGY_ZNODE)
    published = decode_published(data, TOPOLOGY_ZNODE)
    return LedgerClient(
        store, published, config, BookieClient(lambda bookie_id: bookie_id, config.bookie_client())
    )


async def _write_ledger(client: LedgerClient, workload: ReadWorkload) -> int:
    writer = await client.create(REPLICATION, JAVA_PASSWORD)
    payload = b"x" * workload.entry_bytes
    pending: list[asyncio.Future[int]] = []
    for _ in range(workload.entries):
        await writer.wait_for_room()
        pending.append(writer.append(payload))
        if len(pending) >= WRITE_WINDOW:
            await pending.pop(0)
    await asyncio.gather(*pending)
    await writer.close()
    return writer.ledger_id


async def _globelog_read(
    store: MetaStore,
    topology: Topology,
    workload: ReadWorkload,
    ledger_id: int,
    batch_reads: bool,
) -> ReadRun:
    async with await _direct_client(
        store, topology, workload.region, batch_reads=batch_reads
    ) as client:
        reader = await client.open(ledger_id, JAVA_PASSWORD)
        last = reader.lac
        began, cpu_began = time.perf_counter(), time.process_time()
        read = 0
        for low in range(0, last + 1, workload.batch_entries):
            high = min(last, low + workload.batch_entries - 1)
            read += len(await reader.read_entries(low, high))
        seconds, cpu_s = time.perf_counter() - began, time.process_time() - cpu_began
    name = "globelog, batched reads" if batch_reads else "globelog, single reads"
    return ReadRun(name, read, seconds, cpu_s)


async def _java_read(
    tools: Tools, cluster: Cluster, workload: ReadWorkload, ledger_id: int, batch: bool
) -> ReadRun:
    mode = "batch" if batch else "single"
    argv = (
        tools.java, JAVA_HEAP, *nodes.java_client_flags(cluster.topology), "-cp",
        tools.bookkeeper_classpath, str(JAVA_READ_BENCH),
        nodes.metadata_service_uri(cluster.topology, workload.region),
        JAVA_PASSWORD.decode(), str(ledger_id), str(workload.batch_entries), mode,
    )  # fmt: skip
    cpu_before = children_cpu_s()
    with tempfile.TemporaryDirectory(prefix="globelog-bench-reads-") as home:
        log = Path(home) / "java-read.log"
        code = await run_jvm(argv, log, JAVA_READ_TIMEOUT_S, "ReadBench.java")
        figures = parse_java_read(log.read_text(errors="replace"))
        if code != 0 or figures is None:
            raise ClusterError(
                f"ReadBench.java exited {code} without 'READ entries bytes ns':{log_tail(str(log))}"
            )
    entries, nanos = figures
    name = "BookKeeper Java, batched reads" if batch else "BookKeeper Java, single reads"
    return ReadRun(name, entries, max(nanos, 1) / 1e9, children_cpu_s() - cpu_before)


def parse_java_read(text: str) -> tuple[int, int] | None:
    """(entries, nanoseconds) from ReadBench.java's 'READ entries bytes ns' line."""
    found = _JAVA_READ.findall(text)
    return (int(found[-1][0]), int(found[-1][2])) if found else None


def _report(cluster: Cluster, workload: ReadWorkload, runs: list[ReadRun]) -> str:
    lines = [
        f"== globelog bench reads: one closed ledger of {workload.entries} entries x "
        f"{workload.entry_bytes} B, E/W/A 3/3/2, CRC32; read call by call, "
        f"{workload.batch_entries} entries each; bookie ids dialled directly (no WAN proxy)",
        f"   cluster: {cluster.profile} WAN profile (not crossed), bookies journal with fsync on; "
        f"{workload.repeat} reads of each kind, interleaved",
        f"   {'reader':<36} {'median entries/s':>17} {'min':>10} {'max':>10} {'MB/s':>7} "
        f"{'CPU µs/entry':>13}",
    ]
    by_reader: dict[str, list[ReadRun]] = {}
    for run in runs:
        by_reader.setdefault(run.reader, []).append(run)
    medians: dict[str, float] = {}
    for reader, group in by_reader.items():
        rates = [r.per_s for r in group]
        medians[reader] = statistics.median(rates)
        cpu_us = statistics.median(r.cpu_s / r.entries * 1e6 for r in group)
        mb_s = medians[reader] * workload.entry_bytes / 1e6
        lines.append(
            f"   {reader:<36} {medians[reader]:>17,.0f} {min(rates):>10,.0f} {max(rates):>10,.0f} "
            f"{mb_s:>7.1f} {cpu_us:>13.1f}"
        )
    ours = medians.get("globelog, batched reads", 0.0)
    java = next((v for k, v in medians.items() if k.startswith("BookKeeper Java, batched")), 0.0)
    if ours and java:
        lines.append(f"   globelog / BookKeeper, batched reads: {ours / java:.2f}x")
    lines.append(
        "   (Java CPU: the JVM's whole life, start-up included; globelog's: the read only. "
        "Times: the read calls only, on each side.)"
    )
    return "\n".join(lines)
