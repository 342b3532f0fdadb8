"""A failover run on a deployment: a workload, a nemesis and the checker's history.

Producers in every region append unique values to several streams through the write proxies
(every other region's producer idempotent), readers in every region tail them through their
read proxy, and the nemesis applies faults from the deployment's own controls on a schedule
drawn from the seed. Every operation goes to the history (verify/history.py) as it is invoked
and as it completes. Every worker runs under a TaskGroup: one that fails for a reason that is not
an operating answer fails the run (WorkerFailedError) instead of vanishing. After the last fault
is healed and the tailing readers reached the acknowledged end (or their bound ran out, which the
history says), every region reads every stream in full through its read proxy and through the
library, every segment's ensembles are audited, and the history is complete for the checker
(verify/checker.py). However the workload ends, the fault in force (registered before it was
applied) and every partition and slowed route are healed first (verify/run/faults.py).

The same program runs on the local cluster (verify/live) and on the simulation of globelog's
own code (verify/sim): a Deployment (verify/run/deployment.py) is all that differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from core import runtime
from ledger import audit_ledgers, audit_replicas
from verify.run.deployment import Deployment
from verify.run.faults import FaultsInForce, heal_at_end
from verify.run.finals import library_final_reads, proxy_final_reads
from verify.run.nemesis import FAULT_KINDS, nemesis
from verify.run.recorder import Recorder, owned, supervised
from verify.run.workload import Frontier, produce, tail

AFTER_LAST_HEAL_S = 8.0  # the workload outlives the last heal, so the last fault's window can end
PROGRESS_EVERY_S = 15.0  # how often a run says how far its workload is
CATCH_UP_S = 10.0  # the tailing readers' time to reach the acknowledged end once sends stop
# the rebuilders' time to re-make what the faults left a copy short before the final audit
SETTLE_REBUILD_S = 120.0


@dataclass
class RunConfig:
    seed: int = 1
    seconds: float = 60.0
    faults: tuple[str, ...] = FAULT_KINDS
    rate: float = 20.0  # sends per second per producer
    streams: int = 3
    # A namespace of its own per run (values restart at 1: a reused stream would hold the last
    # run's values, which the checker rightly calls duplicates).
    namespace: str = field(default_factory=lambda: f"failover-{time.time_ns():x}")
    out: Path = Path("failover-run")


async def failover_run(
    deployment: Deployment, cfg: RunConfig, file: TextIO, progress: Callable[[str], None]
) -> None:
    """Writes the run's history to `file`. Raises WorkerFailedError when a worker failed for a
    reason that is no operating answer."""
    rec = Recorder(file)
    streams = [f"s{i}" for i in range(cfg.streams)]
    urls = [u for r in deployment.topology.region_names for u in deployment.write_urls(r)[:1]]
    async with deployment.client(urls, cfg.namespace, 30) as admin:
        for stream in streams:
            await admin.create(stream)  # fails if it exists: a run starts from nothing
    frontier = Frontier()
    progress(f"workload on {len(streams)} streams in every region; faults {', '.join(cfg.faults)}")
    faults = FaultsInForce(rec, [
        ("heal every WAN partition", deployment.faults.heal),
        ("unslow every WAN route", deployment.faults.unslow),
    ], revive=deployment.faults.revive)  # fmt: skip
    workload = _workload(deployment, cfg, streams, rec, frontier, faults, progress)
    try:
        await supervised(workload)
    except BaseException as ended:
        await heal_at_end(faults, ended, progress)
        raise
    await heal_at_end(faults, None, progress)
    progress(
        f"{len(frontier.acked)} streams written; final reads through every region's read "
        "proxy and the library, ensemble audits"
    )
    await supervised(proxy_final_reads(deployment, cfg.namespace, streams, frontier.acked, rec))
    ledger_ids = await owned(
        "final-library", library_final_reads(deployment, cfg.namespace, streams, rec)
    )
    topology = deployment.topology
    first, min_regions = topology.region_names[0], topology.replication.min_regions_for_durability
    async with deployment.meta_session(first) as store:
        reports, adhere = await audit_ledgers(store, ledger_ids, min_regions)
    rec.add(process="auditor", type="ok", f="audit", value=bool(adhere),
            detail=f"{len(reports)} segment ledgers audited")  # fmt: skip
    # every copy re-made: what faults left one copy short is rebuilt first, then read
    settled = await deployment.settle_rebuilding(SETTLE_REBUILD_S)
    async with deployment.meta_session(first) as store:
        gaps = await audit_replicas(store, deployment.ledger_config(first), ledger_ids)
    shown = "; ".join(f"ledger {i}: {g.fragment.describe()}: {g.why}" for i, g in gaps[:5])
    rec.add(process="auditor", type="ok", f="replicas", value=len(gaps),
            detail=f"{settled}; {len(ledger_ids)} ledgers read back per copy"
            + (f"; {shown}" if shown else ""))  # fmt: skip


async def _workload(
    deployment: Deployment, cfg: RunConfig, streams: list[str], rec: Recorder,
    frontier: Frontier, in_force: FaultsInForce, progress: Callable[[str], None],
) -> None:  # fmt: skip
    """Producers and the nemesis until the time is up (and the last fault's window could end),
    tailing readers until they reached the acknowledged end or CATCH_UP_S ran out."""
    names = deployment.topology.region_names
    stop_sends, stop_tails = asyncio.Event(), asyncio.Event()
    values = [0]
    deadline = runtime.monotonic() + cfg.seconds
    async with (
        deployment.http() as http,
        asyncio.TaskGroup() as readers,
    ):
        for region in names:
            for stream in streams:
                work = tail(
                    http, deployment, cfg.namespace, region, stream, rec, frontier, stop_tails
                )
                readers.create_task(
                    owned(f"r-{region}-{stream}", deployment.in_region(region, work))
                )
        async with asyncio.TaskGroup() as writers:
            for r, region in enumerate(names):
                for i, stream in enumerate(streams):
                    work = produce(
                        deployment, cfg.namespace, region, stream, (r + i) % 2 == 0,
                        len(streams) / cfg.rate, rec, frontier, values, stop_sends,
                    )  # fmt: skip
                    writers.create_task(
                        owned(f"w-{region}-{stream}", deployment.in_region(region, work))
                    )
            writers.create_task(
                owned("progress", _progress_every(cfg, values, in_force, stop_sends, progress))
            )
            rng = random.Random(cfg.seed)
            faults = nemesis(
                deployment, cfg.faults, cfg.namespace, streams, rec, rng, deadline, in_force
            )
            await owned("nemesis", faults)
            await asyncio.sleep(max(AFTER_LAST_HEAL_S, deadline - runtime.monotonic()))
            stop_sends.set()
        progress(f"{values[0]} sends; waiting up to {CATCH_UP_S:g} s for the tailing readers")
        began = runtime.monotonic()
        behind = await frontier.caught_up(CATCH_UP_S)
        waited = round(runtime.monotonic() - began, 2)
        detail = f"still behind after {CATCH_UP_S:g} s: {'; '.join(behind)}" if behind else (
            "every tailing reader at its stream's acknowledged end"
        )  # fmt: skip
        rec.add(process="harness", type="info" if behind else "ok", f="catch-up", value=waited,
                detail=detail)  # fmt: skip
        if behind:
            progress(f"tailing readers {detail}")
        stop_tails.set()


async def _progress_every(
    cfg: RunConfig, values: list[int], in_force: FaultsInForce, stop: asyncio.Event,
    progress: Callable[[str], None],
) -> None:  # fmt: skip
    """Says how far the workload is every PROGRESS_EVERY_S until `stop`."""
    began = runtime.monotonic()
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PROGRESS_EVERY_S):
                await stop.wait()
        if stop.is_set():
            return
        fault = in_force.in_force or "none"
        progress(
            f"{runtime.monotonic() - began:.0f} s of {cfg.seconds:g} s: {values[0]} sends; "
            f"fault in force: {fault}"
        )
