"""A failover run's nemesis: faults from the deployment's own controls (verify/run/deployment.py)
on a schedule drawn from the seed, each registered for healing before it is applied
(verify/run/faults.py) and written to the history when applied and when healed."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
from dataclasses import dataclass

from core import runtime
from core.errors import GlobelogError
from verify.run.deployment import Deployment, Faults
from verify.run.faults import FaultsInForce, Undo
from verify.run.recorder import Recorder, wall_now

FAULT_KINDS = (
    "kill-write-proxy", "pause-write-proxy", "kill-read-proxy", "pause-read-proxy",
    "kill-bookie", "pause-bookie", "slow-bookie", "partition", "isolate-region", "region-down",
    "expire-session",
)  # fmt: skip
# Faults a run takes only when asked (`--faults`): each waits for rebuilding to re-make every
# copy of a wiped bookie (lost_bookie_delay_s and more), far longer than the others.
REBUILD_FAULT_KINDS = ("wipe-bookie", "wipe-two-bookies")
REBUILT_WAIT_S = 300.0  # a wipe's hold ends when no ledger names the bookie, or after this
QUIET_S = 3.0  # between faults
# How long each fault lasts; a pause outlasts the proxies' ZooKeeper session (1.5 s) and the
# clients' bookie request timeouts, so a paused owner comes back as a zombie. A write proxy's
# pause is the 6 s of the paused-owner goal (its streams write again elsewhere within 3 s).
HOLD_S = {"kill-write-proxy": 2.0, "pause-write-proxy": 6.0, "kill-read-proxy": 2.0,
          "pause-read-proxy": 4.0, "kill-bookie": 4.0, "pause-bookie": 4.0, "slow-bookie": 6.0,
          "partition": 6.0, "isolate-region": 6.0, "region-down": 6.0,
          "expire-session": 0.5, "wipe-bookie": 0.0, "wipe-two-bookies": 0.0}  # fmt: skip
SLOW_BOOKIE_MS = 400  # extra one-way latency of a slow bookie, as the other regions see it


async def _owner(deployment: Deployment, namespace: str, stream: str) -> str | None:
    urls = [u for r in deployment.topology.region_names for u in deployment.write_urls(r)[:1]]
    with contextlib.suppress(GlobelogError, OSError):
        async with deployment.client(urls, namespace, 5) as client:
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
    deployment: Deployment, faults: tuple[str, ...], namespace: str, streams: list[str],
    rec: Recorder, rng: random.Random, deadline: float, in_force: FaultsInForce,
) -> None:  # fmt: skip
    """Faults until `deadline`, every chosen kind at least once; each healed before the next.
    Each fault's undo is registered in `in_force` before the fault is applied, so one that is
    being applied or held when the nemesis is stopped (cancelled, or failing) is the run's to
    heal at its end."""
    # every chosen kind once, in an order drawn from the seed, before any repeats
    first = rng.sample(faults, len(faults))
    # ... and every one of them at least once, even when that takes longer than the run's time
    while first or runtime.monotonic() + QUIET_S + max(HOLD_S.values()) < deadline:
        await asyncio.sleep(QUIET_S)
        kind = first.pop(0) if first else rng.choice(faults)
        planned = await _plan(deployment, kind, namespace, streams, rng)
        if planned is None:
            continue
        in_force.applying(kind, planned.what, planned.undo)
        done = await planned.apply()
        rec.add(process="nemesis", type="info", f="fault", fault=kind, value=planned.what,
                wall=wall_now(), **({"detail": done} if isinstance(done, str) else {}))  # fmt: skip
        if planned.hold is None:
            await asyncio.sleep(HOLD_S[kind])
        else:
            held = await planned.hold()
            rec.add(process="nemesis", type="info", f="held", fault=kind, value=planned.what,
                    detail=str(held))  # fmt: skip
        await in_force.heal()


async def _plan(
    deployment: Deployment, kind: str, namespace: str, streams: list[str], rng: random.Random
) -> _Planned | None:
    """The fault of `kind` on a target drawn from `rng` (None: a stream without an owner to
    fault), how to apply it and how to undo it; nothing is applied yet."""
    topology, names, faults = (
        deployment.topology,
        deployment.topology.region_names,
        deployment.faults,
    )
    if kind in ("kill-write-proxy", "pause-write-proxy", "expire-session"):
        target = await _owner(deployment, namespace, rng.choice(streams))
        if target is None:
            return None
        if kind == "expire-session":  # an instant fault: the proxy gets a new session
            expire = functools.partial(faults.expire_session, target)
            return _Planned(f"expire-session {target}", expire, _nothing)
        return _process_fault(faults, kind, target)
    if kind in ("kill-read-proxy", "pause-read-proxy"):
        region = topology.region(rng.choice(names))
        return _process_fault(faults, kind, region.read_proxies[0].name)
    if kind in ("kill-bookie", "pause-bookie"):
        return _process_fault(faults, kind, rng.choice([b.name for b in topology.bookies]))
    if kind == "slow-bookie":
        target = rng.choice([b.name for b in topology.bookies])
        slow = functools.partial(faults.slow, target, SLOW_BOOKIE_MS)
        return _Planned(f"slow {target} +{SLOW_BOOKIE_MS} ms", slow, faults.unslow)
    if kind == "partition":
        a, b = rng.sample(names, 2)
        return _Planned(
            f"partition {a} {b}", functools.partial(faults.partition, a, b), faults.heal
        )
    if kind in REBUILD_FAULT_KINDS:
        return _wipe(deployment, kind, rng)
    region_name = rng.choice(names)
    if kind == "isolate-region":
        isolate = functools.partial(faults.isolate, region_name)
        return _Planned(f"isolate {region_name}", isolate, faults.heal)
    assert kind == "region-down", kind
    down = functools.partial(faults.region_down, region_name)
    up = functools.partial(faults.region_up, region_name)
    return _Planned(f"region-down {region_name}", down, up)


async def _nothing() -> None:
    return None


def _process_fault(faults: Faults, kind: str, target: str) -> _Planned:
    """kill (undone by a restart) or pause (undone by resume) of one process, by name."""
    if kind.startswith("kill"):
        apply, undo = faults.kill, faults.restart
    else:
        apply, undo = faults.pause, faults.resume
    action = kind.split("-", 1)[0]
    return _Planned(f"{action} {target}", functools.partial(apply, target),
                    functools.partial(undo, target))  # fmt: skip


def _wipe(deployment: Deployment, kind: str, rng: random.Random) -> _Planned:
    """A bookie's disk lost (and, for wipe-two-bookies, then one in another region once the
    first's copies were re-made): held until rebuilding has re-made their copies; undone by
    restarting them empty."""
    faults, bookies = deployment.faults, deployment.topology.bookies
    first = rng.choice(bookies)
    targets = [first]
    if kind == "wipe-two-bookies":
        targets.append(rng.choice([b for b in bookies if b.region != first.region]))

    async def apply() -> str:
        return await faults.wipe(first.name)

    async def hold() -> str:
        done = [await faults.rebuilt(first.bookie_id, REBUILT_WAIT_S)]
        for later in targets[1:]:
            await faults.wipe(later.name)
            done.append(await faults.rebuilt(later.bookie_id, REBUILT_WAIT_S))
        return "; ".join(done)

    async def undo() -> None:
        for target in targets:
            await faults.restart(target.name)

    names = " ".join(t.name for t in targets)
    return _Planned(f"{kind} {names}", apply, undo, hold)
