"""`globelog bench failover`: how long writes stop when a stream's owning write proxy dies.

Each round: a client (ProxyClient over every region's write proxies) writes one record at a
time to a stream; the proxy that owns it is killed with SIGKILL; the time from the kill to the
next acknowledged write (on another proxy, after the owner's ZooKeeper session expired and the
new owner fenced and recovered the last segment) is one sample. The killed proxy is restarted
before the next round. Every acknowledged record is read back at the end, once and in order.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable

from benchmarks.harness import (
    add_cluster_arguments,
    bench_cluster,
    bench_progress,
    check_cluster_ports,
    run_on_bench_cluster,
)
from core.errors import ConfigError, OutcomeUnknownError
from figures.percentiles import percentile
from global_meta import MetaSession
from localcluster import controller
from localcluster.controller import Cluster
from localcluster.plan import PROXY_ZK_SESSION_TIMEOUT_S
from localcluster.tools import Tools, find_tools
from reader.log_reader import LogReader, ReaderConfig
from region.client import Acked, ProxyClient
from region.connections import session

WRITES_PER_ROUND = 20
KILLS_MAX = 200


@dataclasses.dataclass(frozen=True, slots=True)
class FailoverRounds:
    samples: list[float]  # kill -> next acknowledged write, s
    expiries: list[float]  # kill -> the owner's lock gone (broken, or its session expired), s
    owners: list[str]
    acknowledged: int
    intact: bool  # every acknowledged record read back once and in order
    stale: int  # first writes after a kill sent on the dead proxy's connection, sent again


async def failover_rounds(
    cluster: Cluster, tools: Tools, kills: int, progress: Callable[[str], None]
) -> FailoverRounds:
    """`kills` rounds of: writes, SIGKILL of the stream's owning proxy, the next write timed."""
    topology = cluster.topology
    urls = [topology.proxy_url(p) for region in topology.regions for p in region.write_proxies]
    namespace = f"failover{uuid.uuid4().hex[:6]}"
    samples: list[float] = []
    expiries: list[float] = []
    acked: list[Acked] = []
    owners: list[str] = []
    stale: list[int] = []
    async with (
        ProxyClient(urls, namespace=namespace, deadline_s=60) as client,
        session(topology, topology.region_names[0], namespace) as s,
    ):
        await client.create("s")
        acked.append(await client.write("s", b"first"))  # the stream's lock directory exists
        locks = LockWatch(s.streams.store, f"{s.streams.path('s')}/lock")
        async with locks:
            for round_no in range(1, kills + 1):
                for i in range(WRITES_PER_ROUND):
                    acked.append(await client.write("s", f"{round_no}-{i}".encode()))
                owner = str((await client.describe("s"))["owner"]).split("@")[0]
                held = locks.lowest()
                await controller.fault(cluster, tools, "kill", owner)
                killed_at = time.monotonic()
                acked.append(await write_after_kill(client, f"{round_no}-after".encode(), stale))
                samples.append(time.monotonic() - killed_at)
                expiries.append(locks.gone_at(held, killed_at) - killed_at)
                owners.append(owner)
                progress(
                    f"round {round_no}/{kills}: killed {owner}; its lock went after "
                    f"{expiries[-1]:.2f} s; writes resumed after {samples[-1]:.2f} s"
                )
                await controller.fault(cluster, tools, "restart", owner)
        reader = await LogReader.open(s.streams, s.ledgers, "s", None, ReaderConfig(follow=False))
        async with reader:
            seqs = [r.seq async for r in reader]
    intact = seqs == [a.seq for a in acked] == list(range(len(acked)))
    return FailoverRounds(samples, expiries, owners, len(acked), intact, len(stale))


async def bench_failover(
    cluster: Cluster, tools: Tools, kills: int, progress: Callable[[str], None]
) -> str:
    topology = cluster.topology
    urls = [topology.proxy_url(p) for region in topology.regions for p in region.write_proxies]
    rounds = await failover_rounds(cluster, tools, kills, progress)
    ordered = sorted(rounds.samples)
    expired = sorted(rounds.expiries)
    after = sorted(
        total - gone for total, gone in zip(rounds.samples, rounds.expiries, strict=True)
    )
    return "\n".join(
        [
            f"globelog bench failover: topology {topology.name}, WAN profile {cluster.profile}, "
            f"{len(urls)} write proxies, ZooKeeper session {PROXY_ZK_SESSION_TIMEOUT_S} s",
            f"kills: {kills} (SIGKILL of the owning write proxy, one at a time, restarted after)",
            f"kill -> next acknowledged write: median {percentile(ordered, 50):.2f} s, "
            f"p90 {percentile(ordered, 90):.2f} s, min {ordered[0]:.2f} s, max {ordered[-1]:.2f} s",
            f"  of which kill -> lock gone (broken, or the session's expiry): median "
            f"{percentile(expired, 50):.2f} s, "
            f"max {expired[-1]:.2f} s; lock gone -> acknowledged write (takeover: fencing, "
            f"recovery, new segment, session marker, the write): median "
            f"{percentile(after, 50):.2f} s, max {after[-1]:.2f} s",
            f"owners killed: {', '.join(sorted(set(rounds.owners)))}",
            f"records acknowledged {rounds.acknowledged}, read back once and in order: "
            f"{rounds.intact}; first writes after a kill sent on the dead proxy's kept-alive "
            f"connection and sent again: {rounds.stale}",
        ]
    )


async def write_after_kill(client: ProxyClient, payload: bytes, stale: list[int]) -> Acked:
    """The first write after the kill. The client may send it on a kept-alive connection of
    the killed proxy whose end it has not read yet: reset, that write's outcome is unknown to
    the client. Here it is known, since the process was gone before the write was sent:
    nothing was appended, and the write is sent again (counted in `stale`)."""
    for _ in range(3):
        try:
            return await client.write("s", payload)
        except OutcomeUnknownError:
            stale.append(1)
    return await client.write("s", payload)


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

    progress = bench_progress("failover")
    run_on_bench_cluster(
        cluster,
        args.use_running,
        tools,
        progress,
        lambda c: bench_failover(c, tools, args.kills, progress),
    )
    return 0


class LockWatch:
    """The stream's lock nodes as they change, with the time of each change."""

    def __init__(self, store: MetaSession, lock_dir: str) -> None:
        self._store = store
        self._lock_dir = lock_dir
        self._changes: list[tuple[float, list[str]]] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LockWatch:
        self._task = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        async for names in self._store.watch_children(self._lock_dir):
            self._changes.append((time.monotonic(), names))

    def lowest(self) -> str | None:
        """The lock node holding the stream now (as last seen)."""
        names = self._changes[-1][1] if self._changes else []
        return min(names) if names else None

    def gone_at(self, name: str | None, since: float) -> float:
        """When `name` was first seen gone after `since` (now if it has not been)."""
        for at, names in self._changes:
            if at >= since and name not in names:
                return at
        return time.monotonic()
