"""Ledger adds through globelog's LedgerClient, a window of them outstanding, timed one by one.

One run: create the ledgers, warm up, measure (per-add latency from `append` to the
acknowledgement future's callback), close and delete the ledgers. Like BookKeeper's
BenchThroughputLatency, every add goes to a ledger picked at random, and every payload is the
same `entry_bytes` of b"x".
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.figures import AddFigures, ensemble_regions, summarise
from core.errors import ClusterError
from core.routes import TOPOLOGY_ZNODE, decode_published
from core.topology import Replication, Topology
from global_meta import MetaStore
from ledger import BookieClient, DigestType, LedgerClient, LedgerConfig, LedgerWriter

PASSWORD = b"globelog-bench"
ENTRIES_MAX = 5_000_000  # a run's measured adds (its latency list) never exceed this
SECONDS_MAX = 600
WARMUP_SECONDS_MAX = 60.0  # warm-up stops here even if its entries are not all acknowledged
DRAIN_TIMEOUT_S = 30.0  # the adds still outstanding when a run stops must be acked by then
SEED = 7  # the ledger picked for each add: reproducible across runs


@dataclass(frozen=True, slots=True)
class AddWorkload:
    """What every globelog run of one `bench ledger` does."""

    region: str
    entry_bytes: int
    window: int  # adds outstanding at most, over all ledgers
    ledgers: int
    seconds: int
    entries_max: int | None  # measured adds at most; None: only time bounds the run
    warmup_entries: int
    digest: DigestType


@dataclass(frozen=True, slots=True)
class AddRun:
    """The figures of one globelog run and where its copies went."""

    figures: AddFigures
    regions: dict[tuple[str, ...], int]  # ensemble regions (position order) -> ledgers
    ensemble_changes: int
    client_cpu_pct: float  # of one core, over the measured phase
    load_before: float
    load_after: float


async def run_adds(
    store: MetaStore,
    topology: Topology,
    workload: AddWorkload,
    replication: Replication,
    direct: bool,
) -> AddRun:
    """One run on new ledgers; `direct` dials bookie ids instead of the WAN routes."""
    client = await _client(
        store, topology, workload, replication.min_regions_for_durability, direct
    )
    async with client:
        writers: list[LedgerWriter] = []
        try:
            for _ in range(workload.ledgers):
                writers.append(await client.create(replication, PASSWORD))
            run = await _measure(writers, workload)
            for writer in writers:
                await writer.close()
        except BaseException:
            for writer in writers:  # no metadata calls here: they could wait on a broken store
                await writer.abandon()
            raise
        for writer in writers:  # leave a running cluster as it was
            await client.delete(writer.ledger_id)
        region_of = {b.bookie_id: b.region for b in client.published.bookies}
        ensembles = [w.metadata.current_ensemble for w in writers]
        changes = sum(len(w.metadata.ensembles) - 1 for w in writers)
    regions = ensemble_regions(ensembles, region_of)
    return AddRun(run.figures, regions, changes, run.cpu_pct, run.load_before, run.load_after)


def _dial_bookie_id(bookie_id: str) -> str:
    return bookie_id  # registered ids are host:port, as BookKeeper's own client dials them


async def _client(
    store: MetaStore, topology: Topology, workload: AddWorkload, min_regions: int, direct: bool
) -> LedgerClient:
    config = LedgerConfig.of(
        topology,
        workload.region,
        digest_type=workload.digest,
        min_regions_for_durability=min_regions,
    )
    if not direct:
        return await LedgerClient.connect(store, config)
    # The same client with another dialler: no WAN route between it and any bookie. It does
    # not follow membership; placement takes every published bookie as writable.
    data, _ = await store.get(TOPOLOGY_ZNODE)
    published = decode_published(data, TOPOLOGY_ZNODE)
    return LedgerClient(
        store, published, config, BookieClient(_dial_bookie_id, config.bookie_client())
    )


@dataclass(frozen=True, slots=True)
class _Measured:
    figures: AddFigures
    cpu_pct: float
    load_before: float
    load_after: float


async def _measure(writers: Sequence[LedgerWriter], workload: AddWorkload) -> _Measured:
    payload = b"x" * workload.entry_bytes
    rng = random.Random(SEED)
    if workload.warmup_entries:
        await drive_adds(
            writers, payload, workload.window, workload.warmup_entries, WARMUP_SECONDS_MAX, rng
        )
    load_before = os.getloadavg()[0]
    cpu_before = time.process_time()
    count_max = workload.entries_max or ENTRIES_MAX
    latencies_ms, elapsed_s = await drive_adds(
        writers, payload, workload.window, count_max, workload.seconds, rng
    )
    cpu_pct = 100 * (time.process_time() - cpu_before) / elapsed_s
    figures = summarise(latencies_ms, elapsed_s, workload.entry_bytes)
    return _Measured(figures, cpu_pct, load_before, os.getloadavg()[0])


async def drive_adds(
    writers: Sequence[LedgerWriter],
    payload: bytes,
    window: int,
    count_max: int,
    seconds: float,
    rng: random.Random,
) -> tuple[list[float], float]:
    """Adds until `count_max` or `seconds`, `window` outstanding; (latencies in ms, elapsed s).

    Elapsed runs from the first submit to the last acknowledgement. The first failed add
    stops the run and is raised.
    """
    assert writers and window > 0 and count_max > 0, (len(writers), window, count_max)
    clock = time.perf_counter
    permits = asyncio.Semaphore(window)
    pending: set[asyncio.Future[int]] = set()
    latencies_ms: list[float] = []
    failures: list[BaseException] = []
    started = last_ack = clock()

    def acked(submitted: float, future: asyncio.Future[int]) -> None:
        nonlocal last_ack
        permits.release()
        pending.discard(future)
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            failures.append(error)
            return
        last_ack = clock()
        latencies_ms.append((last_ack - submitted) * 1000)

    deadline = started + seconds
    submitted_count = 0
    while submitted_count < count_max and not failures and clock() < deadline:
        await permits.acquire()
        writer = writers[rng.randrange(len(writers))]
        await writer.wait_for_room()
        submitted = clock()
        future = writer.append(payload)
        pending.add(future)
        future.add_done_callback(functools.partial(acked, submitted))
        submitted_count += 1
    if pending:
        _, late = await asyncio.wait(set(pending), timeout=DRAIN_TIMEOUT_S)
        if late:
            raise ClusterError(
                f"{len(late)} adds not acknowledged {DRAIN_TIMEOUT_S} s after the run"
            )
    if failures:
        raise failures[0]
    return latencies_ms, last_ack - started
