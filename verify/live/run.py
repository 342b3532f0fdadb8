"""`globelog failover run`: a workload, a nemesis and the checker on a running cluster.

Producers in every region append unique values to several streams through the write proxies
(every other region's producer idempotent), readers in every region tail them through their
read proxy, and the nemesis applies faults from the cluster's own controls on a schedule drawn
from the seed. Every operation goes to the history (verify/history.py) as it is invoked and as
it completes. After the last fault is healed, every region reads every stream in full (library
readers), every segment's ensembles are audited, and the checker (verify/checker.py) reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from core.errors import GlobelogError
from figures.plots import failover_timeline
from ledger import audit_ledgers
from localcluster import controller, regions, wan
from localcluster.controller import Cluster
from localcluster.tails import proxy_url
from localcluster.tools import Tools
from reader.log_reader import LogReader, ReaderConfig
from reader.session import read_session
from region.client import ProxyClient
from region.client_extras import ReadClient
from verify.checker import CheckReport, check
from verify.history import Op, encode_op, load_history

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
SEND_DEADLINE_S = 20.0
AFTER_LAST_HEAL_S = 8.0


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


@dataclass
class Recorder:
    file: TextIO
    began: float = field(default_factory=time.monotonic)
    lines: int = 0

    def add(self, **op: Any) -> None:
        op["time"] = round(time.monotonic() - self.began, 4)
        self.file.write(encode_op(op) + "\n")
        self.lines += 1


async def _produce(
    cluster: Cluster, cfg: RunConfig, region: str, stream: str, idempotent: bool,
    rec: Recorder, values: list[int], stop: asyncio.Event,
) -> None:  # fmt: skip
    """One producer per region and stream, so a stream stalled by a fault does not stop the
    sends to the others."""
    urls = [proxy_url(cluster, region, "write")] + [
        proxy_url(cluster, r, "write") for r in cluster.topology.region_names if r != region
    ]
    process = f"w-{region}-{stream}"
    async with ProxyClient(urls, cfg.namespace, deadline_s=SEND_DEADLINE_S) as client:
        producer = client.producer(stream)
        while not stop.is_set():
            values[0] += 1
            value = values[0]
            rec.add(process=process, type="invoke", f="send", stream=stream, value=value,
                    idempotent=idempotent)  # fmt: skip
            try:
                payload = str(value).encode()
                if idempotent:
                    acked = await producer.write(payload)
                else:
                    acked = await client.write(stream, payload)
                rec.add(process=process, type="ok", f="send", stream=stream, value=value,
                        dlsn=str(acked.dlsn))  # fmt: skip
            except GlobelogError as err:
                rec.add(process=process, type="info", f="send", stream=stream, value=value,
                        detail=f"{err.code}: {err}"[:200])  # fmt: skip
            await asyncio.sleep(STREAMS / cfg.rate)


async def _tail(cluster: Cluster, cfg: RunConfig, region: str, stream: str, rec: Recorder) -> None:
    process = f"r-{region}-{stream}"
    async with ReadClient([proxy_url(cluster, region, "read")], cfg.namespace) as reader:
        async for record in reader.read(stream, from_seq=0):
            rec.add(process=process, type="ok", f="poll", stream=stream, region=region,
                    records=[[str(record.dlsn), int(record.payload)]])  # fmt: skip


async def _owner(cluster: Cluster, cfg: RunConfig, stream: str) -> str | None:
    urls = [proxy_url(cluster, r, "write") for r in cluster.topology.region_names]
    with contextlib.suppress(GlobelogError, OSError):
        async with ProxyClient(urls, cfg.namespace, deadline_s=5) as client:
            owner = (await client.describe(stream)).get("owner")
            return None if owner is None else str(owner).split("@")[0]
    return None


async def _nemesis(
    cluster: Cluster, tools: Tools, cfg: RunConfig, rec: Recorder, rng: random.Random,
    deadline: float,
) -> None:  # fmt: skip
    names = cluster.topology.region_names
    # every chosen kind once, in an order drawn from the seed, before any repeats
    first = rng.sample(cfg.faults, len(cfg.faults))
    # ... and every one of them at least once, even when that takes longer than the run's time
    while first or time.monotonic() + QUIET_S + max(HOLD_S.values()) < deadline:
        await asyncio.sleep(QUIET_S)
        kind = first.pop(0) if first else rng.choice(cfg.faults)
        hold = HOLD_S[kind]
        heal: Callable[[], Awaitable[Any]]
        if kind in ("kill-write-proxy", "pause-write-proxy", "expire-session"):
            target = await _owner(cluster, cfg, f"s{rng.randrange(STREAMS)}")
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
        await asyncio.sleep(hold)
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


async def _final_reads(cluster: Cluster, cfg: RunConfig, rec: Recorder) -> list[int]:
    ledger_ids: list[int] = []
    for region in cluster.topology.region_names:
        async with read_session(cluster.topology, region, cfg.namespace) as session:
            for i in range(STREAMS):
                stream = f"s{i}"
                reader = await LogReader.open(
                    session.streams, session.ledgers, stream, None, ReaderConfig(follow=False)
                )
                async with reader:
                    records = [[str(r.dlsn), int(r.payload)] async for r in reader]
                rec.add(process=f"final-{region}", type="ok", f="final", stream=stream,
                        region=region, records=records)  # fmt: skip
                if region == cluster.topology.region_names[0]:
                    segments = await session.streams.segments(stream)
                    ledger_ids += [v.segment.ledger_id for v in segments]
    return ledger_ids


async def failover_run(
    cluster: Cluster, tools: Tools, cfg: RunConfig, progress: Callable[[str], None]
) -> tuple[Path, CheckReport]:
    cfg.out.mkdir(parents=True, exist_ok=True)
    history_path = cfg.out / "history.jsonl"
    rng = random.Random(cfg.seed)
    with history_path.open("w", encoding="utf-8") as file:
        rec = Recorder(file)
        async with ProxyClient(
            [proxy_url(cluster, r, "write") for r in cluster.topology.region_names],
            cfg.namespace, deadline_s=30,
        ) as admin:  # fmt: skip
            for i in range(STREAMS):
                await admin.create(f"s{i}")  # fails if it exists: a run starts from nothing
        stop = asyncio.Event()
        values = [0]
        deadline = time.monotonic() + cfg.seconds
        loop = asyncio.get_running_loop()
        workers = [
            loop.create_task(
                _produce(cluster, cfg, region, f"s{i}", (r + i) % 2 == 0, rec, values, stop)
            )
            for r, region in enumerate(cluster.topology.region_names)
            for i in range(STREAMS)
        ]
        readers = [
            loop.create_task(_tail(cluster, cfg, region, f"s{i}", rec))
            for region in cluster.topology.region_names
            for i in range(STREAMS)
        ]
        progress(f"workload on {STREAMS} streams in every region; faults {', '.join(cfg.faults)}")
        try:
            await _nemesis(cluster, tools, cfg, rec, rng, deadline)
            # the workload outlives the last heal, so the last fault's window can end
            await asyncio.sleep(max(AFTER_LAST_HEAL_S, deadline - time.monotonic()))
        finally:
            stop.set()
            await asyncio.gather(*workers, return_exceptions=True)
            await wan.heal(cluster.topology)
            await wan.unslow(cluster.topology)
        await asyncio.sleep(2.0)  # readers catch up to the last acknowledged sends
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        progress(f"{values[0]} sends; final reads in every region and ensemble audits")
        ledger_ids = await _final_reads(cluster, cfg, rec)
        min_regions = cluster.topology.replication.min_regions_for_durability
        reports, adhere = await audit_ledgers(cluster.topology, ledger_ids, min_regions)
        rec.add(process="auditor", type="ok", f="audit", value=bool(adhere),
                detail=f"{len(reports)} segment ledgers audited")  # fmt: skip
    history = load_history(history_path)
    report = check(history)
    timeline = _timeline(history, cfg)
    latency = latency_split(history)
    (cfg.out / "report.json").write_text(
        json.dumps(
            {
                "timeline": str(timeline),
                "send_latency_ms": latency,
                "counts": report.counts(),
                "valid": report.valid,
                "operations": report.operations,
                "unavailability_s": report.unavailability_s,
            },
            indent=1,
        )
    )
    return history_path, report


def fault_spans(history: list[Op]) -> list[tuple[float, float, str]]:
    """(start, end, kind) of each fault, from its fault op to its heal op."""
    spans, open_at = [], None
    for op in history:
        if op.f == "fault":
            open_at = op
        elif op.f == "heal" and open_at is not None:
            spans.append((open_at.time, op.time, str(open_at.fault)))
            open_at = None
    return spans


def _send_latencies(history: list[Op]) -> list[tuple[float, float]]:
    """(completion time, latency ms) of every acknowledged send."""
    invoked: dict[int, float] = {}
    found = []
    for op in history:
        if op.f == "send" and type(op.value) is int:
            if op.type == "invoke":
                invoked[op.value] = op.time
            elif op.type == "ok" and op.value in invoked:
                found.append((op.time, (op.time - invoked[op.value]) * 1000))
    return found


def latency_split(history: list[Op]) -> dict[str, dict[str, float]]:
    """Send latency percentiles (ms) for sends completed during a fault and outside them."""
    spans = fault_spans(history)
    during: list[float] = []
    outside: list[float] = []
    for at, ms in _send_latencies(history):
        (during if any(a <= at <= b for a, b, _ in spans) else outside).append(ms)
    return {
        name: _percentiles(values) for name, values in (("during", during), ("outside", outside))
    }


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"count": len(ordered), "p50": at(0.5), "p90": at(0.9), "p99": at(0.99),
            "max": round(ordered[-1], 1)}  # fmt: skip


def _timeline(history: list[Op], cfg: RunConfig) -> Path:
    acked = [op.time for op in history if op.f == "send" and op.type == "ok"]
    return failover_timeline(
        cfg.out / "timeline.png",
        f"failover run, seed {cfg.seed}: acknowledged sends and their latency, faults shaded",
        acked, _send_latencies(history), fault_spans(history),
    )  # fmt: skip
