"""`globelog bench dl`: globelog's library beside DistributedLog's, on the same bookies.

DistributedLog (Apache's, the system globelog's design comes from; its Java library from
Maven Central, resolved by the set-up into .cache/) runs in benchmarks/java/DlBench.java, one
JVM per run, in its own namespace bound to the cluster's ZooKeeper and bookies, with the
deployment's logins and TLS. globelog runs the same workloads through its library
(benchmarks/stream.py), run for run, alternately:

  1. commit latency: one 100 B record at a time, each its own entry;
  2. write throughput per record size: an entry per record (512 outstanding), and entries
     batched to 64 KiB flushed at least every 2 ms (20 000 outstanding);
  3. delivery: a writer paced at `--tail-rate` records/s and a reader tailing the stream,
     write -> read latency;
  4. catch-up: a new reader of that whole stream, from its first record.

Both dial bookie ids directly: DistributedLog's client resolves a bookie by its registered
address and has no notion of globelog's per-region WAN routes, so neither side crosses the
emulated WAN (the ratios compare the libraries, not the WAN). E/W/A are the topology's on both
sides; globelog places copies by its region rule, while DistributedLog's region-aware policy
sees one region here (every bookie is on 127.0.0.1, and its resolver names regions from host
names), so its ensembles are any E bookies.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import tempfile
import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

from benchmarks.harness import (
    add_cluster_arguments,
    bench_cluster,
    bench_progress,
    check_cluster_ports,
    run_on_bench_cluster,
)
from benchmarks.java_runner import run_jvm
from benchmarks.ledger import fsync_policy
from benchmarks.stream import (
    WINDOW,
    Figures,
    StreamWorkload,
    one_at_a_time,
    tailing,
    throughput,
)
from core.errors import ClusterError, ConfigError
from core.routes import TOPOLOGY_ZNODE, decode_published
from core.streams import TransmitPolicy
from global_meta import MetaStore
from global_meta.streams import StreamMetaStore
from ledger import BookieClient, LedgerClient, LedgerConfig
from localcluster import nodes
from localcluster.controller import Cluster
from localcluster.probes import log_tail
from localcluster.tools import Tools, cache_dir, find_tools
from region.connections import Session

DL_VERSION = "4.17.3"
DL_BENCH = Path(__file__).resolve().parent / "java" / "DlBench.java"
DL_ROOT = "/globelog-bench"  # DistributedLog's znodes (its namespace binding, its logs) below
DL_NAMESPACE = f"{DL_ROOT}/dl"
JAVA_HEAP = "-Xmx768m"
JVM_TIMEOUT_S = 300.0  # past a run's own time: JVM start, warm-up, drain
COMMIT_WRITES = 300
BATCH_BUFFER_BYTES = 64 * 1024
BATCH_FLUSH_MS = 2
TAIL_BUFFER_BYTES = 16 * 1024
_RESULT = re.compile(r"^RESULT (\S+) (\d+) (\d+)$", re.MULTILINE)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument("--region", default="us-east", help="where both writers run")
    parser.add_argument("--reader-region", default="us-west", help="where the tailing reader runs")
    parser.add_argument("--seconds", type=float, default=10.0, help="per throughput run")
    parser.add_argument(
        "--record-bytes", type=lambda text: [int(x) for x in text.split(",")], default=[100, 1024]
    )
    parser.add_argument("--tail-rate", type=int, default=2000, help="records/s of the tail run")
    parser.add_argument("--tail-seconds", type=int, default=5)


def distributedlog_classpath() -> str:
    jars = cache_dir() / f"distributedlog-{DL_VERSION}" / "jars"
    if not (jars / f"distributedlog-core-{DL_VERSION}.jar").is_file():
        raise ConfigError(f"{jars}: DistributedLog {DL_VERSION} jars missing; run `make setup`")
    return f"{jars}/*"


def run(args: argparse.Namespace) -> int:
    problems: list[str] = []
    cluster = bench_cluster(args, problems)
    if args.reader_region not in cluster.topology.region_names:
        problems.append(f"--reader-region {args.reader_region!r}: expected one of the regions")
    if not 1 <= args.seconds <= 600:
        problems.append(f"--seconds {args.seconds}: expected 1..600")
    if any(not 1 <= size <= 1 << 20 for size in args.record_bytes):
        problems.append(f"--record-bytes {args.record_bytes}: expected sizes in 1..1048576")
    if not 1 <= args.tail_rate <= 50_000 or not 1 <= args.tail_seconds <= 120:
        problems.append("--tail-rate 1..50000 and --tail-seconds 1..120 expected")
    if problems:
        raise ConfigError("bench dl: " + "; ".join(problems))
    classpath = distributedlog_classpath()
    check_cluster_ports(cluster, args.use_running)
    workload = StreamWorkload(
        region=args.region,
        reader_region=args.reader_region,
        seconds=args.seconds,
        record_sizes=tuple(args.record_bytes),
        tail_rate=args.tail_rate,
        tail_seconds=args.tail_seconds,
    )
    tools = find_tools()
    progress = bench_progress("dl")
    run_on_bench_cluster(
        cluster,
        args.use_running,
        tools,
        progress,
        lambda c: bench_dl(c, workload, DlJvm(tools, c, classpath), progress),
    )
    return 0


@dataclasses.dataclass(frozen=True, slots=True)
class DlJvm:
    """How DlBench.java is started on this cluster: the deployment's ZooKeeper login and TLS,
    BookKeeper's client TLS, DistributedLog's jars."""

    tools: Tools
    cluster: Cluster
    classpath: str
    warmup_s: int = 5  # unmeasured writes first, in each JVM

    async def run(self, mode: str, *args: object) -> dict[str, Figures]:
        """One DlBench run: a Figures per RESULT line (latencies from its file, in ms)."""
        topology = self.cluster.topology
        zk = topology.zk_connect_for(topology.regions[0].name)
        namespace = f"distributedlog://{zk.split(',')[0]}{DL_NAMESPACE}"
        rep = topology.replication
        log_name = f"{mode}-{uuid.uuid4().hex[:8]}"
        with tempfile.TemporaryDirectory(prefix="globelog-bench-dl-") as home:
            out, log = Path(home) / "latencies", Path(home) / "jvm.log"
            argv = (
                self.tools.java, JAVA_HEAP, f"-Ddlbench.warmup.seconds={self.warmup_s}",
                *nodes.java_client_flags(topology),
                "-cp", self.classpath, str(DL_BENCH), mode, namespace, zk, log_name,
                str(rep.ensemble_size), str(rep.write_quorum), str(rep.ack_quorum), str(out),
                *(str(a) for a in args),
            )  # fmt: skip
            code = await run_jvm(argv, log, JVM_TIMEOUT_S, "DlBench.java")
            text = log.read_text(errors="replace")
            results = parse_results(text)
            if code != 0 or not results:
                raise ClusterError(
                    f"DlBench.java {mode} exited {code} without RESULT lines:{log_tail(str(log))}"
                )
            latencies = tuple(int(line) / 1000 for line in out.read_text().split())
        figures = {}
        for label, records, nanos in results:
            # the catch-up run records no latency of its own: its figure is its rate
            samples = latencies if label != "catch-up" else (nanos / 1e6 / max(records, 1),)
            figures[label] = Figures(f"DistributedLog {label}", records, nanos / 1e9, samples)
        return figures


def parse_results(text: str) -> list[tuple[str, int, int]]:
    """(label, records, nanoseconds) of each 'RESULT label records ns' line."""
    return [(m[1], int(m[2]), int(m[3])) for m in _RESULT.finditer(text)]


async def direct_session(
    stack: AsyncExitStack, cluster: Cluster, region: str, namespace: str
) -> Session:
    """A globelog session whose ledger client dials bookie ids, as DistributedLog's does."""
    topology = cluster.topology
    store = await stack.enter_async_context(await MetaStore.of(topology, region))
    config = LedgerConfig.of(topology, region)
    data, _ = await store.get(TOPOLOGY_ZNODE)
    client = LedgerClient(
        store,
        decode_published(data, TOPOLOGY_ZNODE),
        config,
        BookieClient(lambda bookie_id: bookie_id, config.bookie_client()),
    )
    ledgers = await stack.enter_async_context(client)
    return Session(topology, region, store, ledgers, StreamMetaStore(store, namespace))


async def bench_dl(
    cluster: Cluster, workload: StreamWorkload, jvm: DlJvm, progress: Callable[[str], None]
) -> str:
    pairs: list[tuple[str, Figures, Figures]] = []  # (row, globelog, DistributedLog)
    async with AsyncExitStack() as stack:
        namespace = f"benchdl{uuid.uuid4().hex[:6]}"
        s = await direct_session(stack, cluster, workload.region, namespace)
        remote = await direct_session(stack, cluster, workload.reader_region, namespace)
        progress("commit latency, one record at a time: globelog, then DistributedLog")
        ours = await one_at_a_time(s)
        theirs = await jvm.run("commit", COMMIT_WRITES)
        pairs.append(("commit, 100 B, one at a time", ours, theirs["commit"]))
        for size in workload.record_sizes:
            for policy, buffer, flush_ms in (
                (TransmitPolicy.IMMEDIATE, 0, 0),
                (TransmitPolicy.SIZE, BATCH_BUFFER_BYTES, BATCH_FLUSH_MS),
            ):
                label = f"write {size} B, {'batched' if buffer else 'an entry each'}"
                progress(f"{label}, {workload.seconds:.0f} s: globelog, then DistributedLog")
                ours = await throughput(s, size, policy, workload.seconds)
                theirs = await jvm.run(
                    "write", size, int(workload.seconds), WINDOW[policy], buffer, flush_ms
                )
                pairs.append((label, ours, theirs[f"write-{size}"]))
        progress(f"tail at {workload.tail_rate}/s, then catch-up: globelog, then DistributedLog")
        tail, catch_up = await tailing(s, remote, workload)
        theirs = await jvm.run(
            "tail", workload.tail_rate, workload.tail_seconds, TAIL_BUFFER_BYTES, BATCH_FLUSH_MS
        )
        pairs.append(("tail, write -> read", tail, theirs["tail"]))
        pairs.append(("catch-up read", catch_up, theirs["catch-up"]))
    return report(cluster, workload, pairs, fsync_policy(cluster))


def report(
    cluster: Cluster,
    workload: StreamWorkload,
    pairs: list[tuple[str, Figures, Figures]],
    fsync: str,
) -> str:
    topology = cluster.topology
    rep = topology.replication
    lines = [
        f"globelog bench dl: globelog's library and DistributedLog {DL_VERSION}'s, on topology "
        f"{topology.name}, E/W/A {rep.ensemble_size}/{rep.write_quorum}/{rep.ack_quorum}; both "
        "dial bookie ids (no emulated WAN); globelog keeps its region rule "
        f"(min_regions_for_durability={rep.min_regions_for_durability}), DistributedLog sees "
        "one region",
        f"process layout: this process (globelog; writer in {workload.region}, reader in "
        f"{workload.reader_region}) and one JVM per DistributedLog run, beside "
        f"{len(topology.bookies)} bookies, {len(topology.zookeeper)} ZooKeeper nodes and "
        "toxiproxy on the same machine",
        f"fsync: {fsync}",
        "",
        f"  {'run':<30} {'globelog /s':>12} {'DL /s':>10} {'ratio':>6} "
        f"{'p50 ms g / DL':>15} {'p99 ms g / DL':>15} {'p50 ratio':>9}",
    ]
    for row, ours, theirs in pairs:
        rate_ours = ours.records / ours.elapsed_s
        rate_theirs = theirs.records / theirs.elapsed_s
        p50_ours, p50_theirs = ours.p50_ms(), theirs.p50_ms()
        p99_ours, p99_theirs = ours.percentile_ms(99), theirs.percentile_ms(99)
        lines.append(
            f"  {row:<30} {rate_ours:>12,.0f} {rate_theirs:>10,.0f} "
            f"{rate_ours / rate_theirs:>5.2f}x {p50_ours:>7.2f} / {p50_theirs:<6.2f}"
            f"{p99_ours:>7.2f} / {p99_theirs:<6.2f} {p50_ours / max(p50_theirs, 1e-9):>8.2f}x"
        )
    lines += [
        "",
        "ratio: globelog / DistributedLog records/s (higher is better for globelog); p50 "
        "ratio: globelog / DistributedLog (lower is better). batched: 64 KiB entries flushed "
        "at least every 2 ms on both sides; an entry each: globelog's immediate transmit, "
        "DistributedLog's output buffer 0. Catch-up p50/p99: the time per record.",
    ]
    return "\n".join(lines)
