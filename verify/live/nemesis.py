"""The live failover run's nemesis: faults from the local cluster's own controls on a schedule
drawn from the seed, each registered for healing before it is applied (verify/live/faults.py)
and written to the history when applied and when healed."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from dataclasses import dataclass

from core.errors import GlobelogError
from localcluster import controller, regions, wan
from localcluster.controller import Cluster
from localcluster.tails import proxy_url
from localcluster.tools import Tools
from region.client import ProxyClient
from verify.live.faults import FaultsInForce, Undo
from verify.live.rebuilt import rebuilt
from verify.live.recorder import Recorder

FAULT_KINDS = (
    "kill-write-proxy", "pause-write-proxy", "kill-read-proxy", "pause-read-proxy",
    "kill-bookie", "pause-bookie", "slow-bookie", "partition", "isolate-region", "region-down",
    "expire-session",
)  # fmt: skip
# Faults a run takes only when asked (`--faults`): each waits for rebuilding to re-make every
# copy of a wiped bookie (lost_bookie_delay_s and more), far longer than the others.
REBUILD_FAULT_KINDS = ("wipe-bookie", "wipe-two-bookies")
REBUILT_WAIT_S = 300.0  # a wipe's hold ends when no ledger names the bookie, or after this
STREAMS = 3
QUIET_S = 3.0  # between faults
# How long each fault lasts; a pause outlasts the proxies' ZooKeeper session (1.5 s) and the
# clients' bookie request timeouts, so a paused owner comes back as a zombie.
HOLD_S = {"kill-write-proxy": 2.0, "pause-write-proxy": 4.0, "kill-read-proxy": 2.0,
          "pause-read-proxy": 4.0, "kill-bookie": 4.0, "pause-bookie": 4.0, "slow-bookie": 6.0,
          "partition": 6.0, "isolate-region": 6.0, "region-down": 6.0,
          "expire-session": 0.5, "wipe-bookie": 0.0, "wipe-two-bookies": 0.0}  # fmt: skip
SLOW_BOOKIE_MS = 400  # extra one-way latency of a slow bookie, as the other regions see it


async def _owner(cluster: Cluster, namespace: str, stream: str) -> str | None:
    urls = [proxy_url(cluster, r, "write") for r in cluster.topology.region_names]
    with contextlib.suppress(GlobelogError, OSError):
        async with ProxyClient(urls, namespace, deadline_s=5) as client:
            owner = (await client.describe(stream)).get("owner")
            return None if owner is None else str(owner).split("@")[0]
    return None


@dataclass(frozen=True, slots=True)
class _Planned:
    what: str  # the fault as the history names it (its heal names it the same)
    apply: Undo
    undo: Undo
    hold: Undo | None = None  # held until this ends (default: HOLD_S of its kind)


async def nemesis(
    cluster: Cluster, tools: Tools, faults: tuple[str, ...], namespace: str, rec: Recorder,
    rng: random.Random, deadline: float, in_force: FaultsInForce,
) -> None:  # fmt: skip
    """Faults until `deadline`, every chosen kind at least once; each healed before the next.
    Each fault's undo is registered in `in_force` before the fault is applied, so one that is
    being applied or held when the nemesis is stopped (cancelled, or failing) is the run's to
    heal at its end."""
    # every chosen kind once, in an order drawn from the seed, before any repeats
    first = rng.sample(faults, len(faults))
    # ... and every one of them at least once, even when that takes longer than the run's time
    while first or time.monotonic() + QUIET_S + max(HOLD_S.values()) < deadline:
        await asyncio.sleep(QUIET_S)
        kind = first.pop(0) if first else rng.choice(faults)
        planned = await _plan(cluster, tools, kind, namespace, rng)
        if planned is None:
            continue
        in_force.applying(kind, planned.what, planned.undo)
        done = await planned.apply()
        rec.add(process="nemesis", type="info", f="fault", fault=kind, value=planned.what,
                **({"detail": done} if isinstance(done, str) else {}))  # fmt: skip
        if planned.hold is None:
            await asyncio.sleep(HOLD_S[kind])
        else:
            held = await planned.hold()
            rec.add(process="nemesis", type="info", f="held", fault=kind, value=planned.what,
                    detail=str(held))  # fmt: skip
        await in_force.heal()


async def _plan(
    cluster: Cluster, tools: Tools, kind: str, namespace: str, rng: random.Random
) -> _Planned | None:
    """The fault of `kind` on a target drawn from `rng` (None: a stream without an owner to
    fault), how to apply it and how to undo it; nothing is applied yet."""
    topology, names = cluster.topology, cluster.topology.region_names
    if kind in ("kill-write-proxy", "pause-write-proxy", "expire-session"):
        target = await _owner(cluster, namespace, f"s{rng.randrange(STREAMS)}")
        if target is None:
            return None
        if kind == "expire-session":  # an instant fault: the proxy gets a new session
            expire = functools.partial(controller.expire_session, cluster, target)
            return _Planned(f"expire-session {target}", expire, _nothing)
        return _process_fault(cluster, tools, kind, target)
    if kind in ("kill-read-proxy", "pause-read-proxy"):
        region = topology.region(rng.choice(names))
        return _process_fault(cluster, tools, kind, region.read_proxies[0].name)
    if kind in ("kill-bookie", "pause-bookie"):
        return _process_fault(cluster, tools, kind, rng.choice([b.name for b in topology.bookies]))
    if kind == "slow-bookie":
        target = rng.choice([b.name for b in topology.bookies])
        slow = functools.partial(wan.slow, topology, target, SLOW_BOOKIE_MS)
        unslow = functools.partial(wan.unslow, topology, target)
        return _Planned(f"slow {target} +{SLOW_BOOKIE_MS} ms", slow, unslow)
    if kind == "partition":
        a, b = rng.sample(names, 2)
        cut, heal = (functools.partial(f, topology, a, b) for f in (wan.partition, wan.heal))
        return _Planned(f"partition {a} {b}", cut, heal)
    if kind in REBUILD_FAULT_KINDS:
        return _wipe(cluster, tools, kind, rng)
    region_name = rng.choice(names)
    if kind == "isolate-region":
        isolate = functools.partial(regions.isolate, cluster, region_name)
        heal_all = functools.partial(wan.heal, topology)
        return _Planned(f"isolate {region_name}", isolate, heal_all)
    assert kind == "region-down", kind
    down = functools.partial(regions.region_down, cluster, region_name)
    up = functools.partial(regions.region_up, cluster, tools, region_name)
    return _Planned(f"region-down {region_name}", down, up)


async def _nothing() -> None:
    return None


def _process_fault(cluster: Cluster, tools: Tools, kind: str, target: str) -> _Planned:
    """kill (undone by a restart) or pause (undone by resume) of one process, by name."""
    action = kind.split("-", 1)[0]
    undo = "restart" if action == "kill" else "resume"
    apply, heal = (functools.partial(controller.fault, cluster, tools, a, target)
                   for a in (action, undo))  # fmt: skip
    return _Planned(f"{action} {target}", apply, heal)


def _wipe(cluster: Cluster, tools: Tools, kind: str, rng: random.Random) -> _Planned:
    """A bookie's disk lost (and, for wipe-two-bookies, then one in another region once the
    first's copies were re-made): held until rebuilding has re-made their copies; undone by
    restarting them empty."""
    bookies = cluster.topology.bookies
    first = rng.choice(bookies)
    targets = [first]
    if kind == "wipe-two-bookies":
        targets.append(rng.choice([b for b in bookies if b.region != first.region]))

    async def apply() -> str:
        return await controller.wipe_bookie(cluster, first.name)

    async def hold() -> str:
        done = [await rebuilt(cluster, first.bookie_id, REBUILT_WAIT_S)]
        for later in targets[1:]:
            await controller.wipe_bookie(cluster, later.name)
            done.append(await rebuilt(cluster, later.bookie_id, REBUILT_WAIT_S))
        return "; ".join(done)

    async def undo() -> None:
        for target in targets:
            await controller.fault(cluster, tools, "restart", target.name)

    names = " ".join(t.name for t in targets)
    return _Planned(f"{kind} {names}", apply, undo, hold)
