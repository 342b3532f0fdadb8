"""The product story of `make demo`: one stream written from us-east through the write proxies
and tailed in every region through the read proxies, while the owning write proxy is killed
and a whole region goes down and comes back; then what each region received.

The writer is an idempotent producer (ProxyClient.producer) that sends one record every
WRITE_INTERVAL_S; each payload carries its number and the time it was sent, so every reader
measures delivery latency (acknowledged-and-readable in its region) and spots a loss or a
duplicate by number.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import ClusterError, GlobelogError
from demo.timeline import Timeline, draw, sample_deliveries
from figures.percentiles import percentile
from global_meta import MetaStore
from global_meta.streams import StreamMetaStore
from ledger import audit_ledgers
from localcluster import controller, regions
from localcluster.controller import Cluster
from localcluster.tails import Received, proxy_url, tail_region
from localcluster.tools import Tools
from region.client import Acked, ProxyClient

NAMESPACE = "demo"
STREAM = "orders"
WRITER_REGION = "us-east"
DOWN_REGION = "us-west"
WRITE_INTERVAL_S = 0.02
STEADY_S = 4.0  # writes before, between and after the faults
CATCH_UP_TIMEOUT_S = 90.0
POLL_WAIT_S_MAX = 10.0  # a reader's long poll ends within this once told to stop


@dataclass
class Written:
    acked: dict[int, Acked] = field(default_factory=dict)
    ack_times: list[float] = field(default_factory=list)
    failed: int = 0
    errors: list[str] = field(default_factory=list)


async def _write(client: ProxyClient, written: Written, stop: asyncio.Event) -> None:
    producer = client.producer(STREAM)
    number = 0
    while not stop.is_set():
        body = json.dumps({"n": number, "t": time.time()}).encode()
        try:
            written.acked[number] = await producer.write(body)
            written.ack_times.append(time.monotonic())
        except GlobelogError as err:
            written.failed += 1  # given up (deadline or a final error); the next goes on
            written.errors.append(f"record {number}: {err}")
        number += 1
        await asyncio.sleep(WRITE_INTERVAL_S)


async def _owner(client: ProxyClient) -> str:
    return str((await client.describe(STREAM))["owner"])


def _first_ack_after(written: Written, moment: float) -> float | None:
    later = [t for t in written.ack_times if t > moment]
    return min(later) - moment if later else None


def _ack_gap(written: Written, moment: float) -> tuple[float, float]:
    """The acks either side of `moment`: the last at or before it, the first after it (which
    must exist). Writes go one at a time, so nothing was acknowledged between the two."""
    after = min(t for t in written.ack_times if t > moment)
    before = max((t for t in written.ack_times if t <= moment), default=moment)
    return before, after


async def _settle(
    what: str, done: Callable[[], bool], timeout_s: float, why: Callable[[], str] = str
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise ClusterError(f"demo: {what} did not happen within {timeout_s:.0f} s{why()}")
        await asyncio.sleep(0.2)


def _behind(written: Written, received: dict[str, Received]) -> str:
    """Which regions have not read every acknowledged record, and where they stand."""
    lagging = []
    for region, reader in received.items():
        missing = [n for n in written.acked if n not in reader.counts]
        if missing:
            lagging.append(
                f"{region} lacks {len(missing)} of {len(written.acked)} acknowledged records "
                f"(from record {min(missing)}; polling from seq {reader.next_seq}, "
                f"{reader.errors} failed polls)"
            )
    return ": " + "; ".join(lagging) if lagging else ""


async def _stop(tasks: list[asyncio.Task[None]], grace_s: float) -> None:
    """Waits `grace_s` for the tasks to end by themselves, then cancels the rest."""
    _, pending = await asyncio.wait(tasks, timeout=grace_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _audit(cluster: Cluster) -> tuple[int, bool]:
    async with await MetaStore.of(cluster.topology, WRITER_REGION) as store:
        segments = await StreamMetaStore(store, NAMESPACE).segments(STREAM)
        ledger_ids = [v.segment.ledger_id for v in segments]
        min_regions = cluster.topology.replication.min_regions_for_durability
        _, adhere = await audit_ledgers(store, ledger_ids, min_regions)
    return len(ledger_ids), adhere


async def services_demo(cluster: Cluster, tools: Tools, picture: Path) -> dict[str, Any]:
    """Runs the story, printing each step, and draws it to `picture`; returns the figures of
    the summary table."""
    urls = [proxy_url(cluster, r, "write") for r in cluster.topology.region_names]
    stop_reading = asyncio.Event()
    written = Written()
    received = {r: Received(r) for r in cluster.topology.region_names}
    timeline = Timeline()
    async with (
        ProxyClient([proxy_url(cluster, WRITER_REGION, "write")], NAMESPACE) as local,
        ProxyClient(urls, NAMESPACE, deadline_s=30) as client,
    ):
        try:
            await local.create(STREAM)
        except GlobelogError as err:
            if getattr(err, "code", None) != "stream_exists":
                raise
        await local.last_dlsn(STREAM)  # us-east's proxy takes the stream
        readers = [
            asyncio.create_task(
                tail_region(
                    proxy_url(cluster, r, "read"), received[r], stop_reading, STREAM, NAMESPACE
                )
            )
            for r in received
        ]
        sampler = asyncio.create_task(sample_deliveries(timeline, received, stop_reading))
        try:
            total, failover_s, adhere = await _story(
                cluster, tools, client, written, received, timeline
            )
        finally:
            stop_reading.set()
            await _stop([*readers, sampler], POLL_WAIT_S_MAX)
    timeline.acked_s = [timeline.at(t) for t in written.ack_times]
    return {
        "picture": draw(timeline, picture, STREAM, WRITER_REGION),
        "written": total,
        "failed_writes": written.failed,
        "errors": written.errors,
        "failover_s": failover_s,
        "audit_ok": adhere,
        "regions": {
            region: {
                "read": sum(1 for n in r.counts if n in written.acked),
                "lost": sum(1 for n in written.acked if n not in r.counts),
                "duplicated": sum(c - 1 for c in r.counts.values() if c > 1),
                "p50_ms": percentile(sorted(r.latencies_s), 50) * 1000 if r.latencies_s else 0.0,
                "p99_ms": percentile(sorted(r.latencies_s), 99) * 1000 if r.latencies_s else 0.0,
            }
            for region, r in received.items()
        },
    }


async def _story(
    cluster: Cluster,
    tools: Tools,
    client: ProxyClient,
    written: Written,
    received: dict[str, Received],
    timeline: Timeline,
) -> tuple[int, float, bool]:
    """The faults, with a writer going; then every region's reader catching up. Returns the
    records acknowledged, the owner failover time and the durability audit's verdict."""
    stop_writing = asyncio.Event()
    timeline.began = time.monotonic()
    writer = asyncio.create_task(_write(client, written, stop_writing))
    try:
        await asyncio.sleep(STEADY_S)
        owner = await _owner(client)
        print(f"  writing from {WRITER_REGION} through {owner}: {len(written.acked)} acked")

        victim = owner.split("@")[0]
        print(f"  {await controller.fault(cluster, tools, 'kill', victim)}")
        # `fault` returns once the process is dead: an ack after that is the new owner's; one
        # between the signal and the death was the old owner's last.
        dead_at = time.monotonic()
        await _settle(
            "a write after the kill", lambda: bool(_first_ack_after(written, dead_at)), 60
        )
        last, first = _ack_gap(written, dead_at)
        failover_s = first - last
        timeline.fault(last, first, f"owner {victim} killed: no acks for {failover_s:.1f} s")
        print(
            f"  writes resumed on {await _owner(client)}; no write was acknowledged for "
            f"{failover_s:.2f} s around the kill"
        )
        print(f"  {await controller.fault(cluster, tools, 'restart', victim)}")
        await asyncio.sleep(STEADY_S)

        down_at = time.monotonic()
        killed = await regions.region_down(cluster, DOWN_REGION)
        print(f"  region {DOWN_REGION} down: killed {', '.join(killed)}")
        await _settle(
            "a write with the region down", lambda: bool(_first_ack_after(written, down_at)), 60
        )
        acked_before = len(written.acked)
        await asyncio.sleep(STEADY_S)
        during = len(written.acked) - acked_before
        segments, adhere = await _audit(cluster)
        print(
            f"  with {DOWN_REGION} down: {during} more records acknowledged; owner "
            f"{await _owner(client)}; {segments} segments audited: "
            f"{'every ensemble keeps the durability rule' if adhere else 'AUDIT FAILED'}"
        )
        started = await regions.region_up(cluster, tools, DOWN_REGION)
        last, first = _ack_gap(written, down_at)
        # Writes stall only when the region held the stream's owner: its session must expire.
        stall = f"no acks for {first - last:.1f} s" if first - last >= 1 else "writes went on"
        timeline.fault(down_at, time.monotonic(), f"region {DOWN_REGION} down ({stall})")
        print(f"  region {DOWN_REGION} up: restarted {len(started)} processes")
        await asyncio.sleep(STEADY_S)
    finally:
        stop_writing.set()
        await writer
    total = len(written.acked)
    await _settle(
        "every region reading every acknowledged record",
        lambda: all(all(n in r.counts for n in written.acked) for r in received.values()),
        CATCH_UP_TIMEOUT_S,
        lambda: _behind(written, received),
    )
    return total, failover_s, adhere


def print_summary(summary: dict[str, Any]) -> None:
    print(
        f"  {summary['written']} records acknowledged ({summary['failed_writes']} writes gave "
        f"up); owner failover {summary['failover_s']:.2f} s; durability audit "
        f"{'passed' if summary['audit_ok'] else 'FAILED'}"
    )
    for error in summary["errors"][:3]:
        print(f"  gave up: {error[:300]}")
    header = f"  {'region':<10}{'read':>8}{'lost':>6}{'dup':>5}{'p50 ms':>9}{'p99 ms':>9}"
    print(header)
    for region, row in summary["regions"].items():
        print(
            f"  {region:<10}{row['read']:>8}{row['lost']:>6}{row['duplicated']:>5}"
            f"{row['p50_ms']:>9.0f}{row['p99_ms']:>9.0f}"
        )
    print(
        "  (delivery latency: from the writer's send to the reader's page, through the region's "
        f"read proxy; {DOWN_REGION}'s includes the records it caught up on after its outage)"
    )
