"""`globelog bench proxy`: what a write proxy process sustains, how long a commit takes through
it, and how soon readers in every region see a record through their read proxies.

Three runs on one cluster (every process on this machine, bookies fsync before each ack):

- throughput: `--clients` concurrent bulk writers (batches of `--batch` records) into one
  stream owned by us-east's write proxy, for each `--record-bytes` size, `--seconds` each;
  records/s, MB/s and the proxy process's CPU;
- commit latency: `--latency-writes` single records written one at a time through the local
  owner: percentiles, beside the nearest remote region's round trip (a commit waits for it);
- delivery: a steady writer in us-east while each region's read proxy is long-polled;
  percentiles of send -> read, per region.

With `--compare-security` the same runs follow on a second temporary cluster whose topology
turns tokens and TLS off, and a table sets the two side by side: what security costs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import re
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import yaml

from benchmarks.harness import (
    add_cluster_arguments,
    bench_cluster,
    bench_progress,
    check_cluster_ports,
    on_bench_cluster,
    run_on_bench_cluster,
)
from benchmarks.jit import (
    SETTLED_CORES,
    WARMUP_MAX_S_DEFAULT,
    until_jit_settled,
    warmup_max_problem,
)
from core.errors import ConfigError, StreamExistsError
from figures.percentiles import percentile
from localcluster.controller import Cluster
from localcluster.processes import cpu_seconds, load_state
from localcluster.tails import Received, proxy_url, tail_region
from localcluster.tools import Tools, find_tools
from localcluster.topology_files import load_local_topology
from region.client import ProxyClient
from region.process import event_loop

WRITER_REGION = "us-east"
DELIVERY_RATE_PER_S = 200


# what each kind of process spends per record, in the order the report lists them
CPU_GROUPS = (
    ("write proxy", ("write-proxy",)),
    ("read proxies", ("read-proxy",)),
    ("bookies", ("bookie",)),
    ("ZooKeeper", ("zookeeper", "zk-relay")),
    ("WAN emulation", ("toxiproxy",)),
    ("rebuilders", ("rebuilder",)),
    ("console", ("console",)),
)


async def warm_up(
    cluster: Cluster, namespace: str, args: argparse.Namespace, progress: Callable[[str], None]
) -> str:
    """Unmeasured bulk writes: `--warmup-seconds` at each size, then on (the sizes in turn)
    until the JVMs' JIT compilers settle or `--warmup-max-seconds` have passed
    (benchmarks/jit.py). Returns the report's line on the warm-up."""
    started = time.monotonic()
    for size in args.record_bytes:
        progress(f"warm-up, {size} B records, {args.warmup_seconds:.0f} s (not measured)")
        await throughput(cluster, namespace, size, args, args.warmup_seconds, "warmup")

    async def load(turn: int, seconds: float) -> None:
        size = args.record_bytes[turn % len(args.record_bytes)]
        await throughput(cluster, namespace, size, args, seconds, "warmup")

    line = await until_jit_settled(
        cluster.data_dir, load, args.warmup_max_seconds, progress, started
    )
    # deleted: a warm-up of minutes writes gigabytes that --use-running would keep
    async with ProxyClient([proxy_url(cluster, WRITER_REGION, "write")], namespace) as client:
        for size in args.record_bytes:
            await client.delete(f"warmup-{size}")
    return line


def cpu_by_group(data_dir: Path) -> dict[str, float]:
    """CPU seconds so far of each group of the cluster's processes, and of this client."""
    totals = dict.fromkeys([name for name, _ in CPU_GROUPS] + ["client"], 0.0)
    for record in load_state(data_dir).values():
        group = next((name for name, kinds in CPU_GROUPS if record.kind in kinds), None)
        if group is not None:
            with contextlib.suppress(OSError):  # a process that ended counts no more
                totals[group] += cpu_seconds(record.pid)
    totals["client"] = cpu_seconds(os.getpid())
    return totals


async def throughput(
    cluster: Cluster,
    namespace: str,
    size: int,
    args: argparse.Namespace,
    seconds: float,
    label: str = "tp",
) -> dict[str, float]:
    """Bulk writes of `size`-byte records for `seconds`: records/s, MB/s, the write proxy's
    CPU share, and the CPU microseconds per record of each group of processes."""
    stream = f"{label}-{size}"
    proxy_name = cluster.topology.region(WRITER_REGION).write_proxies[0].name
    pid = load_state(cluster.data_dir)[proxy_name].pid
    batch = [os.urandom(size) for _ in range(args.batch)]
    records = 0
    async with ProxyClient([proxy_url(cluster, WRITER_REGION, "write")], namespace) as client:
        with contextlib.suppress(StreamExistsError):  # a warm-up's later turns write on
            await client.create(stream)
        await client.write_bulk(stream, batch[:10])  # ownership taken, segment open
        deadline = time.monotonic() + seconds

        async def one_client() -> None:
            nonlocal records
            while time.monotonic() < deadline:
                acked = await client.write_bulk(stream, batch)
                records += len(acked)  # not `records += len(await ...)`: that reads first

        groups_before = cpu_by_group(cluster.data_dir)
        cpu_before, started = cpu_seconds(pid), time.monotonic()
        await asyncio.gather(*(one_client() for _ in range(args.clients)))
        elapsed, cpu = time.monotonic() - started, cpu_seconds(pid) - cpu_before
        groups_after = cpu_by_group(cluster.data_dir)
    result = {
        "records_per_s": records / elapsed,
        "mb_per_s": records * size / elapsed / 1e6,
        "proxy_cpu": cpu / elapsed,
        "records": records,
    }
    for group, after in groups_after.items():
        result[f"cpu_us:{group}"] = (after - groups_before[group]) / max(records, 1) * 1e6
    return result


def cpu_line(size: int, result: dict[str, float]) -> str:
    """`  1024 B CPU per record (us): write proxy 15.1, ..., total 91.0`"""
    parts = {k.removeprefix("cpu_us:"): v for k, v in result.items() if k.startswith("cpu_us:")}
    listed = ", ".join(f"{group} {us:.1f}" for group, us in parts.items())
    return f"  {size:>6} B CPU per record (us): {listed}, total {sum(parts.values()):.1f}"


async def commit_latency(cluster: Cluster, namespace: str, writes: int) -> list[float]:
    samples: list[float] = []
    async with ProxyClient([proxy_url(cluster, WRITER_REGION, "write")], namespace) as client:
        await client.create("commit")
        await client.write("commit", b"warm")
        for _ in range(writes):
            started = time.perf_counter()
            await client.write("commit", b"x" * 100)
            samples.append(time.perf_counter() - started)
    return sorted(samples)


async def delivery(cluster: Cluster, namespace: str, seconds: float) -> dict[str, Received]:
    regions = cluster.topology.region_names
    received = {r: Received(r) for r in regions}
    stop = asyncio.Event()
    async with ProxyClient([proxy_url(cluster, WRITER_REGION, "write")], namespace) as client:
        await client.create("delivery")
        readers = [
            asyncio.create_task(
                tail_region(proxy_url(cluster, r, "read"), received[r], stop, "delivery", namespace)
            )
            for r in regions
        ]
        sent = 0
        started = time.monotonic()
        in_flight: set[asyncio.Task[object]] = set()
        while time.monotonic() - started < seconds:
            body = json.dumps({"n": sent, "t": time.time()}).encode()
            task = asyncio.create_task(client.write("delivery", body))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            sent += 1
            await asyncio.sleep(1 / DELIVERY_RATE_PER_S)
        await asyncio.gather(*in_flight)
        async with asyncio.timeout(60):
            while not all(len(r.counts) >= sent for r in received.values()):  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*readers)
    return received


def _ms(ordered: list[float], p: float) -> str:
    return f"{percentile(ordered, p) * 1000:.1f}"


async def bench_proxy(
    cluster: Cluster, args: argparse.Namespace, progress: Callable[[str], None]
) -> str:
    topology = cluster.topology
    namespace = f"bench{uuid.uuid4().hex[:6]}"
    replication = topology.replication
    nearest_ms = min(
        link.one_way_ms * 2
        for link in topology.emulated_wan.profiles[cluster.profile]
        if WRITER_REGION in (link.region_a, link.region_b)
    )
    lines = [
        f"globelog bench proxy: topology {topology.name}, WAN profile {cluster.profile} "
        f"(nearest region from {WRITER_REGION}: {nearest_ms:.0f} ms round trip), "
        f"E/W/A {replication.ensemble_size}/{replication.write_quorum}/{replication.ack_quorum} "
        f"min regions {replication.min_regions_for_durability}",
        f"process layout: one machine, {os.cpu_count()} cores: 3 ZooKeeper, "
        f"{len(topology.bookies)} bookies (journal fsync before every ack), toxiproxy, "
        f"{len(topology.region_names) * 2} proxy processes, this client process",
        "",
        f"throughput into one write proxy ({WRITER_REGION}), {args.clients} concurrent bulk "
        f"requests of {args.batch} records, {args.seconds:.0f} s each:",
        f"  {'record':>8} {'records/s':>11} {'MB/s':>7} {'proxy CPU':>10}",
    ]
    warmed = "warm-up: none (--warmup-seconds 0)"
    if args.warmup_seconds > 0:
        warmed = await warm_up(cluster, namespace, args, progress)
    lines.insert(2, warmed)
    cpu_lines = []
    for size in args.record_bytes:
        progress(f"throughput, {size} B records, {args.seconds:.0f} s")
        result = await throughput(cluster, namespace, size, args, args.seconds)
        lines.append(
            f"  {size:>6} B {result['records_per_s']:>11.0f} {result['mb_per_s']:>7.1f} "
            f"{result['proxy_cpu'] * 100:>9.0f}%"
        )
        cpu_lines.append(cpu_line(size, result))
    lines += ["", "CPU per record by process group (all on this machine's cores):", *cpu_lines]
    progress(f"commit latency, {args.latency_writes} single writes")
    commits = await commit_latency(cluster, namespace, args.latency_writes)
    lines += [
        "",
        f"commit latency, one 100 B record at a time through the local owner "
        f"({args.latency_writes} writes): p50 {_ms(commits, 50)} ms, p90 {_ms(commits, 90)} ms, "
        f"p99 {_ms(commits, 99)} ms, max {_ms(commits, 100)} ms "
        f"(p50 - nearest round trip = {percentile(commits, 50) * 1000 - nearest_ms:+.1f} ms)",
    ]
    progress(f"delivery, {DELIVERY_RATE_PER_S} records/s for {args.seconds:.0f} s")
    received = await delivery(cluster, namespace, args.seconds)
    lines += ["", f"delivery, {DELIVERY_RATE_PER_S} records/s written in {WRITER_REGION}, "
              "send -> read through each region's read proxy (long poll):"]  # fmt: skip
    for region, got in received.items():
        ordered = sorted(got.latencies_s)
        lines.append(
            f"  {region:<8} {len(ordered)} records: p50 {_ms(ordered, 50)} ms, "
            f"p90 {_ms(ordered, 90)} ms, p99 {_ms(ordered, 99)} ms, max {_ms(ordered, 100)} ms"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument("--seconds", type=float, default=10.0, help="per throughput run")
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=15.0,
        help="unmeasured bulk writes at each record size first (JIT warm-up); 0: none",
    )
    parser.add_argument(
        "--warmup-max-seconds",
        type=float,
        default=WARMUP_MAX_S_DEFAULT,
        help="after --warmup-seconds, unmeasured writes go on until the JVMs' JIT compilers "
        f"use under {SETTLED_CORES * 100:.0f}%% of a core, for at most this long in all",
    )
    parser.add_argument(
        "--record-bytes", type=lambda text: [int(x) for x in text.split(",")], default=[100, 1024]
    )
    parser.add_argument("--batch", type=int, default=1000, help="records per bulk request")
    parser.add_argument("--clients", type=int, default=4, help="bulk requests in flight")
    parser.add_argument("--latency-writes", type=int, default=300)
    parser.add_argument(
        "--compare-security",
        action="store_true",
        help="run again with tokens and TLS off (a second temporary cluster) and compare",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --compare-security: pairs of runs, the order alternating (secure first, "
        "then plain first, ...); the table compares medians",
    )


def run(args: argparse.Namespace) -> int:
    args.region = WRITER_REGION
    problems: list[str] = []
    cluster = dataclasses.replace(bench_cluster(args, problems), services=True)
    if not 1 <= args.seconds <= 600:
        problems.append(f"--seconds {args.seconds}: expected 1..600")
    if not 0 <= args.warmup_seconds <= 600:
        problems.append(f"--warmup-seconds {args.warmup_seconds}: expected 0..600")
    if (problem := warmup_max_problem(args.warmup_max_seconds)) is not None:
        problems.append(problem)
    if not 1 <= args.batch <= 100_000:
        problems.append(f"--batch {args.batch}: expected 1..100000")
    if not 1 <= args.clients <= 64:
        problems.append(f"--clients {args.clients}: expected 1..64")
    if not 1 <= args.rounds <= 10:
        problems.append(f"--rounds {args.rounds}: expected 1..10")
    if any(not 1 <= size <= 1 << 20 for size in args.record_bytes):
        problems.append(f"--record-bytes {args.record_bytes}: expected sizes in 1..1048576")
    if problems:
        raise ConfigError("bench proxy: " + "; ".join(problems))
    check_cluster_ports(cluster, args.use_running)
    tools = find_tools()

    progress = bench_progress("proxy")
    if args.compare_security:
        if args.use_running:
            raise ConfigError("bench proxy: --compare-security starts its own clusters")
        event_loop.run(compare_security(cluster, args, tools, progress))
        return 0
    run_on_bench_cluster(
        cluster, args.use_running, tools, progress, lambda c: bench_proxy(c, args, progress)
    )
    return 0


async def compare_security(
    cluster: Cluster, args: argparse.Namespace, tools: Tools, progress: Callable[[str], None]
) -> None:
    """The bench with the topology's security and with tokens and TLS off, side by side;
    `args.rounds` pairs, the order alternating, so that whatever running first or second
    does to a run (a machine still busy with the other cluster's teardown, a warmer disk
    cache) falls on both sides alike."""
    reports: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="globelog-bench-insecure-") as home:
        document = yaml.safe_load(cluster.topology_path.read_text())
        document["security"] = {
            "dir": str(cluster.topology.security.directory),
            "tokens": False,
            "tls": False,
        }
        plain_path = Path(home) / "topology.yaml"
        plain_path.write_text(yaml.safe_dump(document, sort_keys=False))
        plain = dataclasses.replace(
            cluster, topology=load_local_topology(plain_path), topology_path=plain_path
        )
        pair = [("tokens + TLS", cluster), ("tokens and TLS off", plain)]
        for round_number in range(1, args.rounds + 1):
            ordered = pair if round_number % 2 else pair[::-1]
            for label, which in ordered:
                progress(f"--- round {round_number} of {args.rounds}: {label}")
                report = await on_bench_cluster(
                    which, False, tools, progress, lambda c: bench_proxy(c, args, progress)
                )
                print(f"== round {round_number}: {label}\n{report}\n", flush=True)
                reports.setdefault(label, []).append(report)
    print(security_table(reports))


def security_table(reports: dict[str, list[str]]) -> str:
    """Throughput and commit p50 of each side (the median over its reports, one per round),
    and the secure side's cost against the other."""
    rows: dict[str, dict[str, float]] = {}
    for label, side in reports.items():
        figures = [_figures(report) for report in side]
        # a figure every report of the side has (a run may lack the commit line)
        rows[label] = {
            key: statistics.median(f[key] for f in figures)
            for key in figures[0]
            if all(key in f for f in figures)
        }
    secure, plain = (rows[label] for label in reports)
    rounds = len(next(iter(reports.values())))
    lines = [
        "security's cost, same machine, same run"
        + (f" (medians of {rounds} rounds, the order alternating)" if rounds > 1 else "")
        + ":",
        f"  {'':<32}{'secure':>10}{'plain':>10}{'cost':>9}",
    ]
    for key in secure:
        if plain.get(key):
            if key.endswith("records/s"):
                cost = f"{(1 - secure[key] / plain[key]) * 100:+.1f}%"
            elif "CPU us/rec" in key:
                cost = f"{(secure[key] / plain[key] - 1) * 100:+.1f}%"
            else:
                cost = f"{secure[key] - plain[key]:+.2f} ms"
            lines.append(f"  {key:<32}{secure[key]:>10.1f}{plain[key]:>10.1f}{cost:>9}")
    return "\n".join(lines)


def _figures(report: str) -> dict[str, float]:
    """Records/s per size, CPU per record of the named groups and commit p50 of one report."""
    found = {
        f"{m[1]} B records/s": float(m[2])
        for m in re.finditer(r"^\s+(\d+) B\s+(\d+)\s", report, re.MULTILINE)
    }
    for m in re.finditer(r"^\s+(\d+) B CPU per record \(us\): (.*)$", report, re.MULTILINE):
        for part in m[2].split(", "):
            group, _, value = part.rpartition(" ")
            if group in ("write proxy", "bookies", "total"):
                found[f"{m[1]} B CPU us/rec {group}"] = float(value)
    p50 = re.search(r"commit latency.*?p50 ([\d.]+) ms", report, re.DOTALL)
    if p50 is not None:
        found["commit p50 ms"] = float(p50[1])
    return found
