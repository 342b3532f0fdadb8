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
  4. catch-up: a new reader of that whole stream, from its first record;
  5. writer takeover after SIGKILL of the owner, to the first acknowledged write: on globelog's
     side the owning write proxy is killed while a client writes (`bench failover`'s rounds:
     the proxy the client turns to takes the stream); on DistributedLog's, a JVM holding the
     log's writer is killed while a second JVM waits for its lock (DistributedLog's lock and
     ZooKeeper session; its session is set in whole seconds, so it runs at 1 s and at 2 s
     beside the proxies' 1.5 s).

Both dial bookie ids directly: DistributedLog's client resolves a bookie by its registered
address and has no notion of globelog's per-region WAN routes, so neither side crosses the
emulated WAN (the ratios compare the libraries, not the WAN). E/W/A are the topology's on both
sides; globelog places copies by its region rule, while DistributedLog's region-aware policy
sees one region here (every bookie is on 127.0.0.1, and its resolver names regions from host
names), so its ensembles are any E bookies.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import re
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

from benchmarks.failover import failover_rounds
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
from core.children import Child
from core.errors import ClusterError, ConfigError
from core.routes import TOPOLOGY_ZNODE, decode_published
from core.streams import TransmitPolicy
from figures.percentiles import percentile
from global_meta import MetaStore
from global_meta.streams import StreamMetaStore
from ledger import BookieClient, LedgerClient, LedgerConfig
from localcluster import nodes
from localcluster.controller import Cluster
from localcluster.plan import PROXY_ZK_SESSION_TIMEOUT_S
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
TAKEOVERS_MAX = 50
DL_SESSIONS_S = (1, 2)  # DistributedLog's ZooKeeper session in row 5 (whole seconds only)
JVM_LINE_TIMEOUT_S = 120.0  # a JVM's start, or a lock's wait, to its next line
STANDBY_SETTLE_S = 2.0  # the standby's lock request queued behind the owner's


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
    parser.add_argument(
        "--takeovers", type=int, default=5, help="row 5's rounds on each side (0: no row 5)"
    )


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
    if not 0 <= args.takeovers <= TAKEOVERS_MAX:
        problems.append(f"--takeovers {args.takeovers}: expected 0..{TAKEOVERS_MAX}")
    if problems:
        raise ConfigError("bench dl: " + "; ".join(problems))
    # row 5 kills write proxies: the cluster runs them
    cluster = dataclasses.replace(cluster, services=args.takeovers > 0)
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
    takeovers = args.takeovers
    tools = find_tools()
    progress = bench_progress("dl")
    run_on_bench_cluster(
        cluster,
        args.use_running,
        tools,
        progress,
        lambda c: bench_dl(c, workload, DlJvm(tools, c, classpath), progress, tools, takeovers),
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

    def argv(
        self, mode: str, log_name: str, out: Path, *args: object, flags: tuple[str, ...] = ()
    ) -> tuple[str, ...]:
        topology = self.cluster.topology
        zk = topology.zk_connect_for(topology.regions[0].name)
        namespace = f"distributedlog://{zk.split(',')[0]}{DL_NAMESPACE}"
        rep = topology.replication
        return (
            self.tools.java, JAVA_HEAP, f"-Ddlbench.warmup.seconds={self.warmup_s}", *flags,
            *nodes.java_client_flags(topology),
            "-cp", self.classpath, str(DL_BENCH), mode, namespace, zk, log_name,
            str(rep.ensemble_size), str(rep.write_quorum), str(rep.ack_quorum), str(out),
            *(str(a) for a in args),
        )  # fmt: skip

    async def run(self, mode: str, *args: object) -> dict[str, Figures]:
        """One DlBench run: a Figures per RESULT line (latencies from its file, in ms)."""
        log_name = f"{mode}-{uuid.uuid4().hex[:8]}"
        with tempfile.TemporaryDirectory(prefix="globelog-bench-dl-") as home:
            out, log = Path(home) / "latencies", Path(home) / "jvm.log"
            argv = self.argv(mode, log_name, out, *args)
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

    async def takeovers(
        self, rounds: int, session_s: int, progress: Callable[[str], None]
    ) -> list[float]:
        """Per round, seconds from the SIGKILL of a JVM writing a log to the first write
        acknowledged by a JVM that waited for the log's lock."""
        session = f"-Ddlbench.zk.session.seconds={session_s}"
        # the owner starts cold; the standby warms up first (JIT, connections to the bookies),
        # as a long-running process waiting to take over would be (the later -D wins)
        owner_flags = ("-Ddlbench.warmup.seconds=0", session)
        standby_flags = (f"-Ddlbench.warmup.seconds={self.warmup_s}", session)
        samples: list[float] = []
        with tempfile.TemporaryDirectory(prefix="globelog-bench-dl-") as home:
            out = Path(home) / "latencies"
            for round_no in range(1, rounds + 1):
                log_name = f"takeover-{uuid.uuid4().hex[:8]}"
                async with (
                    Jvm(self.argv("own", log_name, out, flags=owner_flags)) as owner,
                    Jvm(self.argv("standby", log_name, out, flags=standby_flags), False) as standby,
                ):
                    await owner.line("OWNING")
                    await standby.start()
                    await standby.line("WAITING")
                    await asyncio.sleep(STANDBY_SETTLE_S)
                    killed_at = time.time()
                    await owner.kill()
                    acked_ms = int((await standby.line("TAKEOVER ")).split()[1])
                samples.append(acked_ms / 1000 - killed_at)
                progress(
                    f"DistributedLog takeover {round_no}/{rounds} (session {session_s} s): "
                    f"{samples[-1]:.2f} s"
                )
        return samples


class Jvm:
    """A DlBench JVM whose output is read line by line, started on entering the block (or
    by `start`, when `started` is False); killed when the block ends."""

    def __init__(self, argv: tuple[str, ...], started: bool = True) -> None:
        self._argv = argv
        self._proc: Child | None = None
        self._seen: list[str] = []
        self._start_now = started

    async def __aenter__(self) -> Jvm:
        if self._start_now:
            await self.start()
        return self

    async def start(self) -> None:
        if self._proc is None:
            self._proc = Child(self._argv, output=True)

    async def line(self, prefix: str) -> str:
        """The next line of output starting with `prefix` (within JVM_LINE_TIMEOUT_S)."""
        assert self._proc is not None
        async with asyncio.timeout(JVM_LINE_TIMEOUT_S):
            while raw := await self._proc.readline(JVM_LINE_TIMEOUT_S):
                text = raw.decode(errors="replace").rstrip()
                self._seen = [*self._seen[-19:], text]
                if text.startswith(prefix):
                    return text
        tail = "\n".join(self._seen)
        raise ClusterError(f"DlBench.java ended without a line {prefix!r}; its last lines:\n{tail}")

    async def kill(self) -> None:
        if self._proc is not None:
            await self._proc.end()

    async def __aexit__(self, *exc: object) -> None:
        await self.kill()


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
    cluster: Cluster,
    workload: StreamWorkload,
    jvm: DlJvm,
    progress: Callable[[str], None],
    tools: Tools,
    takeovers: int,
) -> str:
    pairs: list[tuple[str, Figures, Figures]] = []  # (row, globelog, DistributedLog)
    takeover_rows: list[tuple[str, list[float]]] = []
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
    if takeovers:
        progress(f"writer takeover after SIGKILL, {takeovers} rounds: globelog's proxies")
        rounds = await failover_rounds(cluster, tools, takeovers, progress)
        if not rounds.intact:
            raise ClusterError("bench dl: globelog's takeover rounds lost or reordered a record")
        takeover_rows.append(
            (f"globelog (proxy session {PROXY_ZK_SESSION_TIMEOUT_S:g} s)", rounds.samples)
        )
        for session_s in DL_SESSIONS_S:
            samples = await jvm.takeovers(takeovers, session_s, progress)
            takeover_rows.append((f"DistributedLog (session {session_s} s)", samples))
    return report(cluster, workload, pairs, fsync_policy(cluster), takeover_rows)


def report(
    cluster: Cluster,
    workload: StreamWorkload,
    pairs: list[tuple[str, Figures, Figures]],
    fsync: str,
    takeovers: list[tuple[str, list[float]]],
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
    if takeovers:
        lines += [
            "",
            "writer takeover after SIGKILL of the owner, to the first acknowledged write:",
        ]
        for who, samples in takeovers:
            ordered = sorted(samples)
            lines.append(
                f"  {who:<36} median {percentile(ordered, 50):.2f} s, "
                f"p90 {percentile(ordered, 90):.2f} s, max {ordered[-1]:.2f} s "
                f"({len(ordered)} rounds)"
            )
    return "\n".join(lines)
