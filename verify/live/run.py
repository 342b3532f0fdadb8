"""`globelog failover run`: a workload, a nemesis and the checker on a running cluster.

Producers in every region append unique values to several streams through the write proxies
(every other region's producer idempotent), readers in every region tail them through their
read proxy, and the nemesis applies faults from the cluster's own controls on a schedule drawn
from the seed. Every operation goes to the history (verify/history.py) as it is invoked and as
it completes. Every worker runs under a TaskGroup: one that fails for a reason that is not an
operating answer fails the run (WorkerFailedError) instead of vanishing. After the last fault is
healed and the tailing readers reached the acknowledged end (or their bound ran out, which the
history says), every region reads every stream in full through its read proxy and through the
library, every segment's ensembles are audited, and the checker (verify/checker.py) reports.
However the workload ends, the fault in force (registered before it was applied) and every WAN
partition and slowed route are healed first (verify/live/faults.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ledger import audit_ledgers, audit_replicas
from localcluster import wan
from localcluster.controller import Cluster
from localcluster.probes import operator_session
from localcluster.tails import proxy_url
from localcluster.tools import Tools
from region.client import ProxyClient
from verify.checker import CheckReport, check
from verify.history import Op, load_history
from verify.live.faults import FaultsInForce, heal_at_end
from verify.live.finals import library_final_reads, proxy_final_reads
from verify.live.nemesis import FAULT_KINDS, REBUILD_FAULT_KINDS, nemesis
from verify.live.rebuilt import settle_rebuilding
from verify.live.recorder import Recorder, owned, supervised
from verify.live.summary import fault_spans, latency_split, tail_coverage, timeline
from verify.live.workload import Frontier, produce, tail

__all__ = ["FAULT_KINDS", "REBUILD_FAULT_KINDS", "RunConfig", "failover_run"]

STREAMS = 3
AFTER_LAST_HEAL_S = 8.0  # the workload outlives the last heal, so the last fault's window can end
PROGRESS_EVERY_S = 15.0  # how often a run says how far its workload is
CATCH_UP_S = 10.0  # the tailing readers' time to reach the acknowledged end once sends stop
# the rebuilders' time to re-make what the faults left a copy short before the final audit
SETTLE_REBUILD_S = 120.0
REPORTED_ANOMALIES_MAX = 100  # in report.json; the history has every one


@dataclass
class RunConfig:
    seed: int = 1
    seconds: float = 60.0
    faults: tuple[str, ...] = FAULT_KINDS
    rate: float = 20.0  # sends per second per producer
    # A namespace of its own per run (values restart at 1: a reused stream would hold the last
    # run's values, which the checker rightly calls duplicates).
    namespace: str = field(default_factory=lambda: f"failover-{time.time_ns():x}")
    out: Path = Path("failover-run")


async def failover_run(
    cluster: Cluster, tools: Tools, cfg: RunConfig, progress: Callable[[str], None]
) -> tuple[Path, CheckReport]:
    """Raises WorkerFailedError when a worker failed for a reason that is no operating answer."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    history_path = cfg.out / "history.jsonl"
    streams = [f"s{i}" for i in range(STREAMS)]
    with history_path.open("w", encoding="utf-8") as file:
        rec = Recorder(file)
        async with ProxyClient(
            [proxy_url(cluster, r, "write") for r in cluster.topology.region_names],
            cfg.namespace, deadline_s=30,
        ) as admin:  # fmt: skip
            for stream in streams:
                await admin.create(stream)  # fails if it exists: a run starts from nothing
        frontier = Frontier()
        progress(f"workload on {STREAMS} streams in every region; faults {', '.join(cfg.faults)}")
        faults = FaultsInForce(rec, [
            ("heal every WAN partition", functools.partial(wan.heal, cluster.topology)),
            ("unslow every WAN route", functools.partial(wan.unslow, cluster.topology)),
        ])  # fmt: skip
        workload = _workload(cluster, tools, cfg, streams, rec, frontier, faults, progress)
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
        await supervised(proxy_final_reads(cluster, cfg.namespace, streams, frontier.acked, rec))
        ledger_ids = await owned(
            "final-library", library_final_reads(cluster, cfg.namespace, streams, rec)
        )
        min_regions = cluster.topology.replication.min_regions_for_durability
        reports, adhere = await audit_ledgers(cluster.topology, ledger_ids, min_regions)
        rec.add(process="auditor", type="ok", f="audit", value=bool(adhere),
                detail=f"{len(reports)} segment ledgers audited")  # fmt: skip
        # every copy re-made: what faults left one copy short is rebuilt first, then read
        settled = await settle_rebuilding(cluster, SETTLE_REBUILD_S)
        gaps = await audit_replicas(
            cluster.topology, ledger_ids, cluster.topology.region_names[0], min_regions
        )
        shown = "; ".join(f"ledger {i}: {g.fragment.describe()}: {g.why}" for i, g in gaps[:5])
        rec.add(process="auditor", type="ok", f="replicas", value=len(gaps),
                detail=f"{settled}; {len(ledger_ids)} ledgers read back per copy"
                + (f"; {shown}" if shown else ""))  # fmt: skip
    history = load_history(history_path)
    report = check(history)
    _write_report(cfg, history, report)
    return history_path, report


async def _workload(
    cluster: Cluster, tools: Tools, cfg: RunConfig, streams: list[str], rec: Recorder,
    frontier: Frontier, in_force: FaultsInForce, progress: Callable[[str], None],
) -> None:  # fmt: skip
    """Producers and the nemesis until the time is up (and the last fault's window could end),
    tailing readers until they reached the acknowledged end or CATCH_UP_S ran out."""
    names = cluster.topology.region_names
    stop_sends, stop_tails = asyncio.Event(), asyncio.Event()
    values = [0]
    deadline = time.monotonic() + cfg.seconds
    async with (
        operator_session() as http,
        asyncio.TaskGroup() as readers,
    ):
        for region in names:
            for stream in streams:
                work = tail(http, cluster, cfg.namespace, region, stream, rec, frontier, stop_tails)
                readers.create_task(owned(f"r-{region}-{stream}", work))
        async with asyncio.TaskGroup() as writers:
            for r, region in enumerate(names):
                for i, stream in enumerate(streams):
                    work = produce(
                        cluster, cfg.namespace, region, stream, (r + i) % 2 == 0,
                        STREAMS / cfg.rate, rec, frontier, values, stop_sends,
                    )  # fmt: skip
                    writers.create_task(owned(f"w-{region}-{stream}", work))
            writers.create_task(
                owned("progress", _progress_every(cfg, values, in_force, stop_sends, progress))
            )
            rng = random.Random(cfg.seed)
            faults = nemesis(
                cluster, tools, cfg.faults, cfg.namespace, rec, rng, deadline, in_force
            )
            await owned("nemesis", faults)
            await asyncio.sleep(max(AFTER_LAST_HEAL_S, deadline - time.monotonic()))
            stop_sends.set()
        progress(f"{values[0]} sends; waiting up to {CATCH_UP_S:g} s for the tailing readers")
        began = time.monotonic()
        behind = await frontier.caught_up(CATCH_UP_S)
        waited = round(time.monotonic() - began, 2)
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
    began = time.monotonic()
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PROGRESS_EVERY_S):
                await stop.wait()
        if stop.is_set():
            return
        fault = in_force.in_force or "none"
        progress(
            f"{time.monotonic() - began:.0f} s of {cfg.seconds:g} s: {values[0]} sends; "
            f"fault in force: {fault}"
        )


def _write_report(cfg: RunConfig, history: list[Op], report: CheckReport) -> None:
    plot = timeline(history, cfg.out / "timeline.png", cfg.seed)
    (cfg.out / "report.json").write_text(
        json.dumps(
            {
                "timeline": str(plot),
                "send_latency_ms": latency_split(history),
                "tail_coverage": tail_coverage(history),
                "counts": report.counts(),
                "valid": report.valid,
                "operations": report.operations,
                "unavailability_s": report.unavailability_s,
                # for the console: what a reader of the report wants without the history
                "faults": [
                    {"start_s": round(a, 3), "end_s": round(b, 3), "kind": kind}
                    for a, b, kind in fault_spans(history)
                ],
                "anomalies": [a.describe() for a in report.anomalies[:REPORTED_ANOMALIES_MAX]],
                "anomalies_total": len(report.anomalies),
            },
            indent=1,
        )
    )
