"""The live failover run's nemesis: faults from the local cluster's own controls on a schedule
drawn from the seed, each written to the history when applied and when healed."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from core.errors import GlobelogError
from localcluster import controller, regions, wan
from localcluster.controller import Cluster
from localcluster.tails import proxy_url
from localcluster.tools import Tools
from region.client import ProxyClient
from verify.live.recorder import Recorder

FAULT_KINDS = (
    "kill-write-proxy", "pause-write-proxy", "kill-read-proxy", "pause-read-proxy",
    "kill-bookie", "pause-bookie", "slow-bookie", "partition", "isolate-region", "region-down",
    "expire-session",
)  # fmt: skip
STREAMS = 3
QUIET_S = 3.0  # between faults
# How long each fault lasts; a pause outlasts the proxies' ZooKeeper session (1.5 s) and the
# clients' bookie request timeouts, so a paused owner comes back as a zombie.
HOLD_S = {"kill-write-proxy": 2.0, "pause-write-proxy": 4.0, "kill-read-proxy": 2.0,
          "pause-read-proxy": 4.0, "kill-bookie": 4.0, "pause-bookie": 4.0, "slow-bookie": 6.0,
          "partition": 6.0, "isolate-region": 6.0, "region-down": 6.0,
          "expire-session": 0.5}  # fmt: skip
SLOW_BOOKIE_MS = 400  # extra one-way latency of a slow bookie, as the other regions see it


async def _owner(cluster: Cluster, namespace: str, stream: str) -> str | None:
    urls = [proxy_url(cluster, r, "write") for r in cluster.topology.region_names]
    with contextlib.suppress(GlobelogError, OSError):
        async with ProxyClient(urls, namespace, deadline_s=5) as client:
            owner = (await client.describe(stream)).get("owner")
            return None if owner is None else str(owner).split("@")[0]
    return None


async def nemesis(
    cluster: Cluster, tools: Tools, faults: tuple[str, ...], namespace: str, rec: Recorder,
    rng: random.Random, deadline: float,
) -> None:  # fmt: skip
    """Faults until `deadline`, every chosen kind at least once; each healed before the next,
    and the one in force healed too when the run is cancelled."""
    names = cluster.topology.region_names
    # every chosen kind once, in an order drawn from the seed, before any repeats
    first = rng.sample(faults, len(faults))
    # ... and every one of them at least once, even when that takes longer than the run's time
    while first or time.monotonic() + QUIET_S + max(HOLD_S.values()) < deadline:
        await asyncio.sleep(QUIET_S)
        kind = first.pop(0) if first else rng.choice(faults)
        hold = HOLD_S[kind]
        heal: Callable[[], Awaitable[Any]]
        if kind in ("kill-write-proxy", "pause-write-proxy", "expire-session"):
            target = await _owner(cluster, namespace, f"s{rng.randrange(STREAMS)}")
            if target is None:
                continue
            if kind == "expire-session":  # an instant fault: the proxy gets a new session
                what = await controller.expire_session(cluster, target)
                heal = _nothing
            else:
                heal, what = await _process_fault(cluster, tools, kind, target)
        elif kind in ("kill-read-proxy", "pause-read-proxy"):
            region = cluster.topology.region(rng.choice(names))
            heal, what = await _process_fault(cluster, tools, kind, region.read_proxies[0].name)
        elif kind in ("kill-bookie", "pause-bookie"):
            target = rng.choice([b.name for b in cluster.topology.bookies])
            heal, what = await _process_fault(cluster, tools, kind, target)
        elif kind == "slow-bookie":
            target = rng.choice([b.name for b in cluster.topology.bookies])
            await wan.slow(cluster.topology, target, SLOW_BOOKIE_MS)
            heal = functools.partial(wan.unslow, cluster.topology, target)
            what = f"slow {target} +{SLOW_BOOKIE_MS} ms"
        elif kind == "partition":
            a, b = rng.sample(names, 2)
            await wan.partition(cluster.topology, a, b)
            heal = functools.partial(wan.heal, cluster.topology, a, b)
            what = f"partition {a} {b}"
        elif kind == "isolate-region":
            region_name = rng.choice(names)
            await regions.isolate(cluster, region_name)
            heal = functools.partial(wan.heal, cluster.topology)
            what = f"isolate {region_name}"
        else:
            region_name = rng.choice(names)
            await regions.region_down(cluster, region_name)
            heal = functools.partial(regions.region_up, cluster, tools, region_name)
            what = f"region-down {region_name}"
        rec.add(process="nemesis", type="info", f="fault", fault=kind, value=what)
        try:
            await asyncio.sleep(hold)
        finally:
            await heal()
        rec.add(process="nemesis", type="info", f="heal", fault=kind, value=what)


async def _nothing() -> None:
    return None


async def _process_fault(
    cluster: Cluster, tools: Tools, kind: str, target: str
) -> tuple[Callable[[], Awaitable[Any]], str]:
    """kill (healed by a restart) or pause (healed by resume) of one process, by name."""
    action = kind.split("-", 1)[0]
    await controller.fault(cluster, tools, action, target)
    undo = "restart" if action == "kill" else "resume"
    return functools.partial(controller.fault, cluster, tools, undo, target), f"{action} {target}"
