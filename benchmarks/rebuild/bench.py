"""`globelog bench rebuild`: how fast a lost bookie's copies are re-made, by globelog's
rebuilders and by BookKeeper's own recovery, on the same bookies, with a writer in the
foreground.

One cluster (every process on this machine). The bench fills it with `--ledgers` closed
ledgers of `--ledger-mb` MB each (replication from the topology), starts a foreground writer
adding `--foreground-kb` KB entries at `--foreground-rate` per second, and then, one phase
after another, loses a bookie for good (`cluster wipe`: killed, data and cookie deleted) and
times its rebuild:

1. globelog, the rebuilder of one region (us-east) only;
2. globelog, a rebuilder in every region;
3. BookKeeper: `BookieShell recover <bookie>` (BookKeeperAdmin's recovery with its client's
   default placement), on the same cluster.

globelog's rebuilders are `globelog serve rebuilder` processes, as deployed, each with
`--ledgers-at-once` and its pace (`--rate-mb-s` at most; yielding to the foreground down to
`--rate-min-mb-s` when its adds queue more than `--yield-delay-ms` at a bookie, or fixed with
`--yield-delay-ms 0`). Each phase marks the lost bookie's ledgers itself (what the auditor does once the bookie has
been gone for `lost_bookie_delay_s`: that delay is a setting, not a rate) and ends when no
ledger's metadata names the bookie; the bookie then comes back empty for the next phase. For
each: ledgers and bytes re-made, seconds, MB/s, the foreground's add latency p50/p99 before
and during, and, after it, how many ensembles break the durability rule (the audit). The
bytes re-made are what the lost bookie held, for both systems. A PNG of the foreground's
latency through the phases goes to `--plot`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.harness import (
    add_cluster_arguments,
    bench_cluster,
    bench_progress,
    check_cluster_ports,
    run_on_bench_cluster,
)
from core.errors import ConfigError, GlobelogError
from core.settings.rebuild_settings import RebuildSettings
from figures.percentiles import percentile
from figures.plots import latency_over_time
from global_meta import MetaStore
from ledger import LedgerClient, LedgerConfig, UnderReplication, audit_ledgers
from localcluster import controller, nodes, plan, processes
from localcluster.controller import Cluster
from localcluster.probes import wait_until
from localcluster.tools import Tools, find_tools
from rebuild.auditor import Auditor
from rebuild.bookies import holdings, ledgers_on
from rebuild.service import read_rebuilders

MB = 1_000_000
FILL_WRITERS = 8  # ledgers filled at once
BASELINE_S = 10.0
PHASE_BOUND_S = 1800.0
POLL_S = 0.05  # how often a phase looks whether anything is still marked
PROGRESS_S = 5.0
# The foreground's p99 is also given from this long after each loss: the loss itself costs the
# foreground writer an ensemble change when the bookie was in its ensemble, which is not the
# copy's doing.
LOSS_SETTLE_S = 5.0
JAVA_TIMEOUT_S = 3600


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument("--ledgers", type=int, default=100)
    parser.add_argument("--ledger-mb", type=float, default=4.0)
    parser.add_argument("--entry-kb", type=int, default=64)
    parser.add_argument("--foreground-rate", type=float, default=50.0, help="adds per second")
    parser.add_argument("--foreground-kb", type=int, default=1)
    parser.add_argument("--ledgers-at-once", type=int, default=4, help="per rebuilder")
    defaults = RebuildSettings()
    parser.add_argument(
        "--rate-mb-s", type=float, default=defaults.rate_bytes_s / MB,
        help="the most it copies at (per rebuilder, or all together with --shared-pace on)",
    )  # fmt: skip
    parser.add_argument(
        "--rate-min-mb-s", type=float, default=defaults.rate_min_bytes_s / MB,
        help="the least it yields down to (the same)",
    )  # fmt: skip
    parser.add_argument(
        "--yield-delay-ms", type=float, default=defaults.yield_delay_s * 1000,
        help="queueing at a bookie the rebuild yields at; 0: a fixed --rate-mb-s",
    )  # fmt: skip
    parser.add_argument(
        "--shared-pace", choices=["on", "off"], default="on" if defaults.shared_pace else "off",
        help="on: the rates are the rebuilders' together (each copying takes its share)",
    )  # fmt: skip
    parser.add_argument("--plot", type=Path, default=Path("bench-rebuild.png"))
    parser.add_argument("--skip-bookkeeper", action="store_true")


@dataclass
class Samples:
    """The foreground's add latencies: (seconds since the bench started, ms)."""

    started: float = field(default_factory=time.monotonic)
    points: list[tuple[float, float]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    baseline: tuple[float, float] = (0.0, 0.0)  # the foreground alone, before any loss
    full_check: tuple[int, float] = (0, 0.0)  # the auditor's full check: ledgers, seconds

    def between(self, start: float, end: float) -> list[float]:
        return sorted(ms for t, ms in self.points if start <= t < end)


@dataclass
class Phase:
    name: str
    bookie: str
    ledgers: int = 0
    bytes: int = 0
    seconds: float = 0.0
    started: float = 0.0
    ended: float = 0.0
    rule_breaks: int = 0
    left: int = 0
    overhead_s: float = 0.0  # BookKeeper's shell: its JVM's start, taken off `seconds`


async def fill(
    client: LedgerClient, cluster: Cluster, args: argparse.Namespace, say: Callable[[str], None]
) -> None:
    entry = b"x" * (args.entry_kb * 1024)
    per_ledger = max(1, int(args.ledger_mb * MB) // len(entry))
    queue = list(range(args.ledgers))
    done = [0]

    async def writer() -> None:
        while queue:
            queue.pop()
            handle = await client.create(cluster.topology.replication, b"bench-rebuild")
            for _ in range(per_ledger):
                await handle.add(entry)
            await handle.close()
            done[0] += 1
            if done[0] % 10 == 0:
                say(f"filled {done[0]}/{args.ledgers} ledgers")

    async with asyncio.TaskGroup() as writers:
        for _ in range(FILL_WRITERS):
            writers.create_task(writer())


async def foreground(
    client: LedgerClient,
    cluster: Cluster,
    args: argparse.Namespace,
    samples: Samples,
    stop: asyncio.Event,
) -> None:
    """Adds at a fixed rate to a ledger of its own, rolled every 5 000 entries."""
    payload = b"f" * (args.foreground_kb * 1024)
    period = 1.0 / args.foreground_rate
    handle = await client.create(cluster.topology.replication, b"bench-foreground")
    added = 0
    next_at = time.monotonic()
    while not stop.is_set():
        next_at += period
        began = time.monotonic()
        try:
            await handle.add(payload)
        except GlobelogError as err:  # counted, and the writer goes on in a new ledger
            samples.failures.append(f"{began - samples.started:.1f} s: {err.code}")
            handle = await client.create(cluster.topology.replication, b"bench-foreground")
            continue
        samples.points.append((began - samples.started, (time.monotonic() - began) * 1000))
        added += 1
        if added % 5000 == 0:
            await handle.close()
            handle = await client.create(cluster.topology.replication, b"bench-foreground")
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    await handle.close()


async def globelog_phase(
    cluster: Cluster, store: MetaStore, client: LedgerClient, bookie: str, regions: list[str],
    args: argparse.Namespace, samples: Samples, say: Callable[[str], None],
) -> Phase:  # fmt: skip
    name = f"globelog, rebuilders in {', '.join(regions)}"
    bookie_id = cluster.topology.bookie(bookie).bookie_id
    phase = Phase(name, bookie)
    async with _rebuilders(cluster, store, regions, args) as status:
        before = await _ledger_bytes_on(client, bookie_id)
        await controller.wipe_bookie(cluster, bookie)
        await _unregistered(store, bookie_id)  # as the auditor waits for, before any delay
        phase.started = time.monotonic() - samples.started
        auditor = Auditor(store, client, RebuildSettings(lost_bookie_delay_s=0.0), "bench-auditor")
        phase.ledgers = await auditor.audit_bookies({bookie_id})
        say(f"{name}: {bookie} wiped, {phase.ledgers} ledgers marked")
        started = said = time.monotonic()
        while await _under(store).marked():
            if time.monotonic() - started > PHASE_BOUND_S:
                break
            if time.monotonic() - said >= PROGRESS_S:
                said = time.monotonic()
                say(f"{name}: {await status()}")
            await asyncio.sleep(POLL_S)
        phase.seconds = time.monotonic() - started
        phase.ended = time.monotonic() - samples.started
    phase.bytes = before
    phase.left = len(await ledgers_on(client, bookie_id))
    say(f"{phase.name}: {phase.bytes / MB:.0f} MB in {phase.seconds:.1f} s, {phase.left} left")
    await _restart_empty(cluster, bookie)
    return phase


async def _unregistered(store: MetaStore, bookie_id: str) -> None:
    """Until the lost bookie's registration is gone (its ZooKeeper session's timeout)."""

    async def gone() -> bool:
        return bookie_id not in await store.children("/ledgers/available")

    await wait_until(f"{bookie_id} out of the registry", gone, 60)


def _under(store: MetaStore) -> UnderReplication:
    return UnderReplication(store)


@asynccontextmanager
async def _rebuilders(
    cluster: Cluster, store: MetaStore, regions: list[str], args: argparse.Namespace
) -> AsyncIterator[Callable[[], Awaitable[str]]]:
    """A rebuilder process (`globelog serve rebuilder`, as deployed) in each of `regions`,
    each with the bench's settings, published before the loss; yields a reader of their
    progress. They leave the lost bookie's marking to the bench (a long delay)."""
    settings = [
        "--lost-bookie-delay-s", "3600", "--check-interval-s", "86400",
        "--ledgers-at-once", str(args.ledgers_at_once),
        "--rate-bytes-s", str(int(args.rate_mb_s * MB)),
        "--rate-min-bytes-s", str(int(args.rate_min_mb_s * MB)),
        "--yield-delay-s", str(args.yield_delay_ms / 1000), "--shared-pace", args.shared_pace,
    ]  # fmt: skip
    records = []
    names = {f"bench-rebuilder-{region}" for region in regions}
    try:
        for region in regions:
            spec = plan.rebuilder_spec(cluster.topology_path, region, cluster.data_dir)
            argv = [*spec.argv, *settings]
            argv[argv.index("--name") + 1] = f"bench-rebuilder-{region}"
            records.append(processes.start(dataclasses.replace(spec, argv=tuple(argv))))

        async def published() -> bool:
            return names <= {r["name"] for r in await read_rebuilders(store)}

        await wait_until("the bench's rebuilders (their status)", published, 60)

        async def progress() -> str:
            mine = [r for r in await read_rebuilders(store) if r["name"] in names]
            copied = sum(r["bytes_copied"] for r in mine) / MB
            paces = ", ".join(f"{r['pace_bytes_s'] / MB:.1f}" for r in mine)
            return f"{copied:.0f} MB re-made; may copy at {paces} MB/s"

        yield progress
    finally:
        for record in records:
            await asyncio.to_thread(processes.stop, record)


async def bookkeeper_phase(
    cluster: Cluster, tools: Tools, store: MetaStore, client: LedgerClient, bookie: str,
    samples: Samples,
    say: Callable[[str], None],
) -> Phase:  # fmt: skip
    bookie_id = cluster.topology.bookie(bookie).bookie_id
    phase = Phase("BookKeeper, BookieShell recover", bookie)
    phase.ledgers = len(await ledgers_on(client, bookie_id))
    before = await _ledger_bytes_on(client, bookie_id)
    await controller.wipe_bookie(cluster, bookie)
    await _unregistered(store, bookie_id)
    say(f"{phase.name}: {bookie} wiped, {phase.ledgers} ledgers name it")
    conf = cluster.data_dir / "bookies" / "shell.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(plan.shell_conf(cluster.topology))
    argv = [
        tools.java, "-Xmx512m", *nodes.java_zookeeper_flags(cluster.topology), "-cp",
        tools.bookkeeper_classpath, "org.apache.bookkeeper.bookie.BookieShell", "-conf", str(conf), "recover", "-f", "-sk",
        bookie_id,
    ]  # fmt: skip
    # the shell's own start (a JVM, its ZooKeeper session) is not rebuilding: timed alone,
    # with a command that only lists the bookies, and taken off
    listing = [*argv[:-4], "listbookies", "-rw"]
    log = cluster.data_dir / "logs" / "bookkeeper-recover.log"
    started = time.monotonic()
    await _java(listing, log)
    phase.overhead_s = time.monotonic() - started
    phase.started = time.monotonic() - samples.started
    started = time.monotonic()
    returncode = await _java(argv, log)
    phase.seconds = time.monotonic() - started - phase.overhead_s
    phase.ended = time.monotonic() - samples.started
    if returncode != 0:
        raise ConfigError(f"BookieShell recover exited {returncode}; its output: {log}")
    phase.bytes = before
    phase.left = len(await ledgers_on(client, bookie_id))
    say(f"{phase.name}: {phase.bytes / MB:.0f} MB in {phase.seconds:.1f} s, {phase.left} left")
    await _restart_empty(cluster, bookie)
    return phase


async def _java(argv: list[str], log: Path) -> int:
    """Runs a Java command with its output appended to `log` (never held in memory: the
    shell can log without end), at most JAVA_TIMEOUT_S; its exit status."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        done = await asyncio.to_thread(
            subprocess.run, argv, stdout=out, stderr=subprocess.STDOUT,
            timeout=JAVA_TIMEOUT_S, check=False,
        )  # fmt: skip
    return done.returncode


async def _ledger_bytes_on(client: LedgerClient, bookie_id: str) -> int:
    """Bytes of the copies the bookie holds (closed ledgers: entries held times mean size)."""
    return (await holdings(client)).bytes[bookie_id]


async def _restart_empty(cluster: Cluster, bookie: str) -> None:
    await controller.fault(cluster, find_tools(), "restart", bookie)


async def _rule_breaks(cluster: Cluster, store: MetaStore, client: LedgerClient) -> int:
    ids = await client.ledger_ids()
    reports, _ = await audit_ledgers(
        store, ids, cluster.topology.replication.min_regions_for_durability
    )
    return sum(a["adherence"] == "fail" for r in reports for a in r["audit"])


async def bench(
    cluster: Cluster, tools: Tools, args: argparse.Namespace, say: Callable[[str], None]
) -> str:
    topology = cluster.topology
    config = LedgerConfig.of(topology, "us-east")
    samples = Samples()
    phases: list[Phase] = []
    async with (
        await MetaStore.of(topology) as store,
        await LedgerClient.connect(store, config) as client,
    ):
        await UnderReplication(store).ensure_layout()
        say(f"fill: {args.ledgers} ledgers of {args.ledger_mb} MB in {args.entry_kb} KB entries")
        await fill(client, cluster, args, say)
        samples.full_check = await _full_check(store, client)
        say(f"full check: {samples.full_check[0]} ledgers in {samples.full_check[1]:.1f} s")
        stop = asyncio.Event()
        writer = asyncio.create_task(foreground(client, cluster, args, samples, stop))
        try:
            baseline_from = time.monotonic() - samples.started
            await asyncio.sleep(BASELINE_S)
            samples.baseline = (baseline_from, time.monotonic() - samples.started)
            by_region = {
                r: [b.name for b in topology.bookies if b.region == r]
                for r in topology.region_names
            }
            losses = [by_region["us-west"][0], by_region["eu-west"][0], by_region["us-west"][-1]]
            phases.append(
                await globelog_phase(
                    cluster, store, client, losses[0], ["us-east"], args, samples, say
                )
            )
            phases[-1].rule_breaks = await _rule_breaks(cluster, store, client)
            await asyncio.sleep(BASELINE_S)
            phases.append(
                await globelog_phase(
                    cluster,
                    store,
                    client,
                    losses[1],
                    list(topology.region_names),
                    args,
                    samples,
                    say,
                )
            )
            phases[-1].rule_breaks = await _rule_breaks(cluster, store, client)
            if not args.skip_bookkeeper:
                await asyncio.sleep(BASELINE_S)
                phases.append(
                    await bookkeeper_phase(cluster, tools, store, client, losses[2], samples, say)
                )
                phases[-1].rule_breaks = await _rule_breaks(cluster, store, client)
        finally:
            stop.set()
            await writer
    return report(args, cluster, samples, phases)


async def _full_check(store: MetaStore, client: LedgerClient) -> tuple[int, float]:
    """The auditor's full check over every ledger (each ensemble against the rule, each
    ledger's last entries asked of its bookies), timed: (ledgers, seconds)."""
    ledgers = len(await client.ledger_ids())
    started = time.monotonic()
    marked = await Auditor(store, client, RebuildSettings(), "bench-auditor").full_check(set())
    if marked:
        raise ConfigError(f"the full check marked {marked} ledgers of a healthy cluster")
    return ledgers, time.monotonic() - started


def report(
    args: argparse.Namespace, cluster: Cluster, samples: Samples, phases: list[Phase]
) -> str:
    before = samples.between(*samples.baseline) or [0.0]
    lines = [
        f"rebuild: {args.ledgers} ledgers x {args.ledger_mb} MB ({args.entry_kb} KB entries), "
        f"replication {cluster.topology.replication}, WAN profile {cluster.profile}; every "
        "process on this machine, bookies fsync their journal",
        f"foreground: {args.foreground_rate:g} adds/s of {args.foreground_kb} KB from us-east; "
        f"before any loss p50 {percentile(before, 50):.1f} ms, p99 {percentile(before, 99):.1f} ms",
        f"the auditor's full check (from us-east, nothing running beside it): "
        f"{samples.full_check[0]} ledgers in {samples.full_check[1]:.1f} s",
        "",
        "| phase | lost bookie | ledgers | MB re-made | seconds | MB/s | foreground p50 / p99 during (ms) | p99 during / before | the same from the loss + "
        f"{LOSS_SETTLE_S:g} s | rule breaks after | ledgers still naming it |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    series: dict[str, tuple[Sequence[float], Sequence[float]]] = {
        "foreground adds": ([t for t, _ in samples.points], [ms for _, ms in samples.points])
    }
    for p in phases:
        during = samples.between(p.started, p.ended) or [0.0]
        settled = samples.between(p.started + LOSS_SETTLE_S, p.ended) or [0.0]
        rate = p.bytes / MB / p.seconds if p.seconds else 0.0
        lines.append(
            f"| {p.name} | {p.bookie} | {p.ledgers} | {p.bytes / MB:.0f} | {p.seconds:.1f} | "
            f"{rate:.1f} | {percentile(during, 50):.1f} / {percentile(during, 99):.1f} | "
            f"{percentile(during, 99) / percentile(before, 99):.2f}x | "
            f"{percentile(settled, 99) / percentile(before, 99):.2f}x | {p.rule_breaks} | {p.left} |"
        )
    path = latency_over_time(args.plot, "foreground add latency through the rebuild phases", series)
    raw = args.plot.with_suffix(".csv")
    raw.write_text("".join(f"{t:.3f},{ms:.3f}\n" for t, ms in samples.points))
    lines += [
        "",
        "phases (s since start): "
        + "; ".join(f"{p.name} {p.started:.0f}-{p.ended:.0f}" for p in phases),
        f"plot: {path}; the foreground's adds (s since start, ms): {raw}",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    problems: list[str] = []
    args.region = "us-east"
    cluster = bench_cluster(args, problems)
    if args.ledgers < 1 or args.ledger_mb <= 0 or args.entry_kb < 1:
        problems.append("--ledgers, --ledger-mb and --entry-kb: expected > 0")
    if problems:
        raise ConfigError("bench rebuild: " + "; ".join(problems))
    check_cluster_ports(cluster, args.use_running)
    tools = find_tools()
    say = bench_progress("rebuild")
    cluster = dataclasses.replace(cluster, services=False)

    async def go(c: Cluster) -> str:
        return await bench(c, tools, args, say)

    run_on_bench_cluster(cluster, args.use_running, tools, say, go)
    return 0
