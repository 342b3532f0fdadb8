"""`globelog bench ledger`: ledger add throughput and latency on real bookies, and BookKeeper's
own Java benchmark against the same bookies in the same run, side by side.

First 10000 unmeasured adds to every bookie (as the Java benchmark warms up), then runs, one
after the other, each on new ledgers:
  1. globelog through the WAN routes, the configured min_regions_for_durability;
  2. the same with min_regions_for_durability=1 (placement may still spread copies);
  3. globelog dialling bookie ids directly, as BookKeeper's Java client does;
  4. BookKeeper's BenchThroughputLatency (one JVM), same E/W/A, entry size, ledgers and window.
Runs 3 and 4 see the same network, so theirs is the apples-to-apples comparison.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.adds import AddRun, AddWorkload, run_adds
from benchmarks.figures import AddFigures, describe_regions, ensemble_regions
from benchmarks.java_runner import SEND_LIMIT_DEFAULT, JavaBenchRequest, JavaRun, run_java_bench
from benchmarks.jit import until_jit_settled
from core.errors import ClusterError
from core.topology import Replication, Topology
from global_meta import MetaStore
from ledger import DigestType
from localcluster import controller, nodes
from localcluster.controller import Cluster
from localcluster.tools import Tools

Progress = Callable[[str], None]
BOOKIE_WARMUP_ADDS = 10_000  # BenchThroughputLatency's warm-up count
BOOKIE_WARMUP_S_MAX = 120


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the figures table."""

    client: str
    path: str
    min_regions: str
    figures: AddFigures
    cpu: str
    load: str
    ensembles: str


async def bench_ledger(
    cluster: Cluster,
    tools: Tools,
    workload: AddWorkload,
    replication: Replication,
    *,
    use_running: bool,
    progress: Progress,
    warmup_max_s: float = 0.0,
) -> str:
    """Runs every configuration; with `use_running` False, on a temporary cluster torn down
    afterwards (also on errors, Ctrl-C and SIGTERM). Returns the printable report."""
    with _sigterm_cancels(), tempfile.TemporaryDirectory(prefix="globelog-bench-") as home:
        if use_running:
            setup = f"already running from {cluster.data_dir}"
            fsync = fsync_policy(cluster)
            rows = await _all_runs(
                cluster, tools, workload, replication, Path(home), progress, warmup_max_s
            )
        else:
            cluster = dataclasses.replace(cluster, data_dir=Path(home) / "data")
            try:
                progress(f"cluster up: temporary data dir {cluster.data_dir}")
                up = await controller.up(cluster, tools)
                setup = f"temporary (fresh data dir, up in {up.total_s:.1f} s, torn down after)"
                fsync = fsync_policy(cluster)
                rows = await _all_runs(
                    cluster, tools, workload, replication, Path(home), progress, warmup_max_s
                )
            finally:
                controller.down(cluster, purge=True)
    return "\n".join(_header(cluster, workload, replication, setup, fsync) + rows)


FSYNC_KEYS = ("journalSyncData", "journalWriteData", "journalMaxGroupWaitMSec")


def fsync_policy(cluster: Cluster) -> str:
    """The journal settings the bookies run with, read from their config files."""
    seen: dict[str, set[str]] = {key: set() for key in FSYNC_KEYS}
    for bookie in cluster.topology.bookies:
        conf = nodes.bookie_dir(cluster.data_dir, bookie) / "bk.conf"
        try:
            lines = conf.read_text().splitlines()
        except OSError as err:
            raise ClusterError(f"{conf}: cannot read the bookie's config: {err}") from err
        values = dict(line.split("=", 1) for line in lines if "=" in line)
        for key in FSYNC_KEYS:
            seen[key].add(values.get(key, "default").strip())
    settings = ", ".join(f"{key}={'/'.join(sorted(v))}" for key, v in seen.items())
    fsync_on = seen["journalSyncData"] <= {"true", "default"}  # BookKeeper's default is true
    verdict = (
        "fsyncs its journal before acknowledging an add"
        if fsync_on
        else ("does NOT fsync before every ack on some bookies: not headline figures")
    )
    return f"every bookie {verdict} ({settings}; 'default' = BookKeeper's); journals share one disk"


@contextlib.contextmanager
def _sigterm_cancels() -> Iterator[None]:
    """SIGTERM cancels the benchmark like Ctrl-C does, so the `finally` tears the cluster
    down (the default action would kill this process and leave nine JVMs running)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    terminated: list[bool] = []

    def cancel() -> None:
        terminated.append(True)
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, cancel)
    try:
        yield
    except asyncio.CancelledError:
        if terminated:
            raise ClusterError("bench ledger: stopped by SIGTERM; cleaned up") from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _all_runs(
    cluster: Cluster,
    tools: Tools,
    workload: AddWorkload,
    replication: Replication,
    work_dir: Path,
    progress: Progress,
    warmup_max_s: float,
) -> list[str]:
    topology = cluster.topology
    async with await MetaStore.of(topology) as store:
        warm_up = await _warm_bookies(store, topology, workload, progress)
        if warmup_max_s > 0:
            settled = await until_jit_settled(
                cluster.data_dir,
                _everywhere_adds(store, topology, workload),
                warmup_max_s,
                progress,
            )
            warm_up = f"{warm_up}; then {settled.removeprefix('warm-up: ')}"
        rows, notes = await _globelog_runs(store, cluster, workload, replication, progress)
    progress(f"run {len(rows) + 1}/{len(rows) + 1}: BookKeeper BenchThroughputLatency (JVM)")
    request = JavaBenchRequest(
        replication.ensemble_size,
        replication.write_quorum,
        replication.ack_quorum,
        workload.entry_bytes,
        throttle=workload.window,
        ledgers=workload.ledgers,
        seconds=workload.seconds,
        send_limit=workload.entries_max or SEND_LIMIT_DEFAULT,
    )
    load_before = os.getloadavg()[0]
    java = await run_java_bench(
        tools, topology.zk_connect, nodes.java_client_flags(topology), request, work_dir
    )
    rows.append(_java_row(java, topology, load_before))
    return [
        warm_up,
        "",
        *_table(rows),
        *notes,
        *_comparison(rows[-2], java, len(rows) - 1, workload.digest),
    ]


async def _warm_bookies(
    store: MetaStore, topology: Topology, workload: AddWorkload, progress: Progress
) -> str:
    """Unmeasured adds to every bookie first, as BenchThroughputLatency's own warm-up does
    (E=W=A=all bookies, 10000 adds), so the first run does not pay for the bookies' JIT."""
    bookies = len(topology.bookies)
    progress(f"bookie warm-up: {BOOKIE_WARMUP_ADDS} adds to all {bookies} bookies, direct")
    everywhere = _everywhere(topology)
    warm = dataclasses.replace(
        workload, entries_max=BOOKIE_WARMUP_ADDS, warmup_entries=0, seconds=BOOKIE_WARMUP_S_MAX
    )
    run = await run_adds(store, topology, warm, everywhere, direct=True)
    return (
        f"bookie warm-up (unmeasured, as BookKeeper's): {run.figures.adds} adds at "
        f"E=W=A={bookies} in {run.figures.elapsed_s:.1f} s, direct"
    )


def _everywhere(topology: Topology) -> Replication:
    """Every entry on every bookie: a warm-up that reaches them all."""
    bookies = len(topology.bookies)
    return Replication(bookies, bookies, bookies, min_regions_for_durability=1)


def _everywhere_adds(
    store: MetaStore, topology: Topology, workload: AddWorkload
) -> Callable[[int, float], Awaitable[object]]:
    """Unmeasured adds to every bookie for a given time: the warm-up's load."""
    everywhere = _everywhere(topology)

    async def load(turn: int, seconds: float) -> None:
        warm = dataclasses.replace(
            workload, entries_max=None, warmup_entries=0, seconds=max(1, round(seconds))
        )
        await run_adds(store, topology, warm, everywhere, direct=True)

    return load


async def _globelog_runs(
    store: MetaStore,
    cluster: Cluster,
    workload: AddWorkload,
    replication: Replication,
    progress: Progress,
) -> tuple[list[Row], list[str]]:
    wan = f"WAN routes ({cluster.profile})"
    plans = [(replication, False, wan)]
    if replication.min_regions_for_durability > 1:
        plans.append((dataclasses.replace(replication, min_regions_for_durability=1), False, wan))
    plans.append((replication, True, "direct"))
    rows: list[Row] = []
    notes: list[str] = []
    for number, (rep, direct, path) in enumerate(plans, 1):
        min_regions = rep.min_regions_for_durability
        progress(f"run {number}/{len(plans) + 1}: globelog, {path}, min_regions {min_regions}")
        run = await run_adds(store, cluster.topology, workload, rep, direct)
        rows.append(_globelog_row(run, path, rep))
        notes += _spread_note(number, run, workload.region, rep)
    return rows, notes


def _globelog_row(run: AddRun, path: str, rep: Replication) -> Row:
    changes = f"; {run.ensemble_changes} ensemble change(s)" if run.ensemble_changes else ""
    return Row(
        "globelog",
        path,
        str(rep.min_regions_for_durability),
        run.figures,
        f"{run.client_cpu_pct:.0f} % {_cpu_per_add_us(run):.0f}",
        f"{run.load_before:.1f}-{run.load_after:.1f}",
        describe_regions(run.regions) + changes,
    )


def _cpu_per_add_us(run: AddRun) -> float:
    cpu_s = run.client_cpu_pct / 100 * run.figures.elapsed_s
    return cpu_s / run.figures.adds * 1e6


def _java_row(java: JavaRun, topology: Topology, load_before: float) -> Row:
    region_of = {b.bookie_id: b.region for b in topology.bookies}
    regions = describe_regions(ensemble_regions(java.output.ensembles, region_of))
    return Row(
        "BookKeeper",
        "direct",
        "-",
        java.figures,
        f"({java.cpu_s:.0f} s) -",
        f"{load_before:.1f}-{os.getloadavg()[0]:.1f}",
        regions or "not logged",
    )


def _header(
    cluster: Cluster, workload: AddWorkload, rep: Replication, setup: str, fsync: str
) -> list[str]:
    topology = cluster.topology
    links = ", ".join(
        f"{link.region_a}<->{link.region_b} {link.one_way_ms:g}±{link.jitter_ms:g} ms"
        for link in topology.emulated_wan.profiles[cluster.profile]
    )
    bound = f"{workload.seconds} s" + (
        f" or {workload.entries_max} adds" if workload.entries_max else ""
    )
    return [
        f"ledger adds: E/W/A {rep.ensemble_size}/{rep.write_quorum}/{rep.ack_quorum}, "
        f"{workload.entry_bytes}-byte entries, digest {workload.digest.name}, at most "
        f"{workload.window} adds outstanding over {workload.ledgers} ledger(s) (a random "
        f"ledger per add), {bound} per run after {workload.warmup_entries} warm-up adds; "
        f"globelog client in {workload.region}",
        f"cluster: {topology.name}, {setup}",
        f"layout: one machine, {os.cpu_count()} cores shared with other work: "
        f"{len(topology.zookeeper)} ZooKeeper JVMs, {len(topology.bookies)} bookie JVMs, "
        "1 toxiproxy (WAN emulator); the globelog client is this Python process (one asyncio "
        "loop); BenchThroughputLatency is one more JVM (-Xmx512m), run after the globelog runs",
        f"fsync: {fsync}",
        "bookie links: "
        + (
            "TLS (START_TLS, client certificates, role authorization) for globelog and Java"
            if topology.security.tls
            else "in clear (--bookie-tls off)"
        ),
        f"WAN profile {cluster.profile} (one way, each direction): {links}; 'direct' runs "
        "bypass it",
        "latency: submit to acknowledgement, per add, warm-up excluded; percentiles by "
        "nearest rank; MB/s = payload bytes / 10^6; CPU: globelog's client process over the "
        "measured phase (100 % = one core) and its CPU time per add in microseconds, the Java "
        "JVM's whole life (start-up and warm-up included) in seconds; load: 1-minute load "
        "average before-after",
        "",
    ]


def _table(rows: list[Row]) -> list[str]:
    head = (
        f"{'run':<4}{'client':<11}{'dial path':<24}{'min_reg':>7}{'adds/s':>9}{'MB/s':>7}"
        f"{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}{'max ms':>9}{'CPU, us/add':>13}"
        f"{'load':>11}"
    )
    lines = [head]
    for number, row in enumerate(rows, 1):
        f = row.figures
        lines.append(
            f"{number:<4}{row.client:<11}{row.path:<24}{row.min_regions:>7}"
            f"{f.adds_per_s:>9.0f}{f.mb_per_s:>7.2f}{f.median_ms:>9.1f}{f.p95_ms:>9.1f}"
            f"{f.p99_ms:>9.1f}{f.p999_ms:>10.1f}{f.max_ms:>9.1f}{row.cpu:>13}{row.load:>11}"
        )
    lines.append("")
    lines.append("ensemble regions (position order) x ledgers:")
    lines += [f"  run {n}: {row.ensembles}" for n, row in enumerate(rows, 1)]
    return lines


def _spread_note(number: int, run: AddRun, region: str, rep: Replication) -> list[str]:
    """Says when min_regions_for_durability=1 still put copies in other regions."""
    remote = [r for regions in run.regions for r in regions if r != region]
    if rep.min_regions_for_durability > 1 or not remote:
        return []
    local_copies = min(regions.count(region) for regions in run.regions)
    waits = rep.ensemble_size == rep.write_quorum and local_copies < rep.ack_quorum
    consequence = (
        f"with {local_copies} local copy(ies) and ack quorum {rep.ack_quorum}, every add "
        f"from {region} waits for a copy across the WAN"
        if waits
        else "some acks may still come from other regions"
    )
    return [
        f"  run {number}: min_regions_for_durability=1 does not force other regions, but "
        f"placement spread the copies over regions anyway (the most even split); {consequence}"
    ]


def _comparison(ours: Row, java: JavaRun, ours_number: int, digest: DigestType) -> list[str]:
    theirs = java.figures
    mine = ours.figures
    ratios = ", ".join(
        f"{name} {a / b:.2f}x"
        for name, a, b in (
            ("adds/s", mine.adds_per_s, theirs.adds_per_s),
            ("p50", mine.median_ms, theirs.median_ms),
            ("p95", mine.p95_ms, theirs.p95_ms),
            ("p99", mine.p99_ms, theirs.p99_ms),
            ("p99.9", mine.p999_ms, theirs.p999_ms),
            ("max", mine.max_ms, theirs.max_ms),
        )
    )
    req = java.request
    wan_runs = "run 1" if ours_number == 2 else f"runs 1-{ours_number - 1}"
    lines = [
        "",
        f"apples-to-apples: run {ours_number} (globelog, direct) vs run {ours_number + 1} "
        "(BookKeeper's Java client): same bookies, same loopback network with no WAN proxy "
        "(both dial bookie ids), same E/W/A, entry size, ledgers and adds outstanding",
        f"  globelog / BookKeeper: {ratios}",
        f"  not comparable with the Java run: {wan_runs} (through the emulated WAN, which "
        "BenchThroughputLatency cannot use: it dials bookie ids)",
        f"  BookKeeper's -throttle {req.throttle} also caps each ledger handle at "
        f"{req.throttle} adds/s: at most {req.rate_cap_per_s} adds/s over {req.ledgers} "
        "ledger(s); globelog has no such cap",
        f"  BookKeeper's own printed figures (same samples, rank floor(n*p/100)): "
        f"{java.output.completions} completions in {java.output.duration_ms} ms = "
        f"{java.output.ops_per_s} ops/s, p95 {java.output.p95_ms:.1f} ms, "
        f"p99 {java.output.p99_ms:.1f} ms; digest CRC32"
        + ("" if digest is DigestType.CRC32 else f" (globelog's: {digest.name}, not the same)"),
        "  BookKeeper's warm-up (own ledgers, E=W=A=all bookies, 10000 adds): "
        + (
            f"skipped (at {req.rate_cap_per_s} adds/s it would take over a minute)"
            if req.skip_warmup
            else f"{java.output.warmup_ops_per_s} ops/s"
        ),
    ]
    if java.capped:
        lines.append(
            "  WARNING: the Java run reached its rate cap, so its adds/s is the cap and not "
            "the bookies' limit; raise --ledgers or --window for a throughput comparison"
        )
    return lines
