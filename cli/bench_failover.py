"""`globelog bench failover`: how long writes stop when a stream's owning write proxy dies.

Each round: a client (ProxyClient over every region's write proxies) writes one record at a
time to a stream; the proxy that owns it is killed with SIGKILL; the time from the kill to the
next acknowledged write (on another proxy, after the owner's ZooKeeper session expired and the
new owner fenced and recovered the last segment) is one sample. The killed proxy is restarted
before the next round. Every acknowledged record is read back at the end, once and in order.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import uuid
from collections.abc import Callable

from cli import event_loop
from cli.bench_figures import percentile
from cli.bench_ledger_options import (
    add_cluster_arguments,
    bench_cluster,
    check_cluster_ports,
    on_bench_cluster,
)
from cli.cluster import controller
from cli.cluster.controller import Cluster
from cli.cluster.plan import PROXY_ZK_SESSION_TIMEOUT_S
from cli.stream_commands import session
from cli.tools import Tools, find_tools
from core.errors import ConfigError
from reader.log_reader import LogReader, ReaderConfig
from region.client import Acked, ProxyClient

WRITES_PER_ROUND = 20
KILLS_MAX = 200


async def bench_failover(
    cluster: Cluster, tools: Tools, kills: int, progress: Callable[[str], None]
) -> str:
    topology = cluster.topology
    urls = [
        f"http://{p.endpoint.host}:{p.endpoint.port}"
        for region in topology.regions
        for p in region.write_proxies
    ]
    namespace = f"failover{uuid.uuid4().hex[:6]}"
    samples: list[float] = []
    acked: list[Acked] = []
    owners: list[str] = []
    async with ProxyClient(urls, namespace=namespace, deadline_s=60) as client:
        await client.create("s")
        for round_no in range(1, kills + 1):
            for i in range(WRITES_PER_ROUND):
                acked.append(await client.write("s", f"{round_no}-{i}".encode()))
            owner = str((await client.describe("s"))["owner"]).split("@")[0]
            await controller.fault(cluster, tools, "kill", owner)
            killed_at = time.monotonic()
            acked.append(await client.write("s", f"{round_no}-after".encode()))
            samples.append(time.monotonic() - killed_at)
            owners.append(owner)
            progress(
                f"round {round_no}/{kills}: killed {owner}; writes resumed after {samples[-1]:.2f} s"
            )
            await controller.fault(cluster, tools, "restart", owner)
    async with session(topology, topology.region_names[0], namespace) as s:
        reader = await LogReader.open(s.streams, s.ledgers, "s", None, ReaderConfig(follow=False))
        async with reader:
            seqs = [r.seq async for r in reader]
    intact = seqs == [a.seq for a in acked] == list(range(len(acked)))
    ordered = sorted(samples)
    return "\n".join(
        [
            f"globelog bench failover: topology {topology.name}, WAN profile {cluster.profile}, "
            f"{len(urls)} write proxies, ZooKeeper session {PROXY_ZK_SESSION_TIMEOUT_S} s",
            f"kills: {kills} (SIGKILL of the owning write proxy, one at a time, restarted after)",
            f"kill -> next acknowledged write: median {percentile(ordered, 50):.2f} s, "
            f"p90 {percentile(ordered, 90):.2f} s, min {ordered[0]:.2f} s, max {ordered[-1]:.2f} s",
            f"owners killed: {', '.join(sorted(set(owners)))}",
            f"records acknowledged {len(acked)}, read back once and in order: {intact}",
        ]
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument("--kills", type=int, default=20, help="owner proxies killed, one a round")


def run(args: argparse.Namespace) -> int:
    args.region = "us-east"  # bench_cluster checks a client region; the client uses every region
    problems: list[str] = []
    cluster = dataclasses.replace(bench_cluster(args, problems), services=True)
    if not 1 <= args.kills <= KILLS_MAX:
        problems.append(f"--kills {args.kills}: expected 1..{KILLS_MAX}")
    if problems:
        raise ConfigError("bench failover: " + "; ".join(problems))
    check_cluster_ports(cluster, args.use_running)
    tools = find_tools()

    def progress(line: str) -> None:
        print(f"globelog bench failover: {line}", file=sys.stderr, flush=True)

    async def main() -> str:
        return await on_bench_cluster(
            cluster,
            args.use_running,
            tools,
            progress,
            lambda c: bench_failover(c, tools, args.kills, progress),
        )

    print(event_loop.run(main()))
    return 0
