"""A seeded fault run of the ledger writer on the real cluster: bookies killed (-9) and
restarted, paused and resumed, regions partitioned and healed, one fault at a time, while a
writer in us-east keeps a window of adds outstanding; then recovery from eu-west.

Checked: no acknowledged entry lost or changed, the writer never dies (a valid ensemble always
exists: one fault at a time leaves two regions reachable), no two consecutive ensembles in the
metadata are identical, and every await ends within its bound (I1, I6, I8)."""

from __future__ import annotations

import asyncio
import itertools
import random
import time

import pytest

from core.topology import Replication
from localcluster import controller, wan
from localcluster.controller import Cluster
from localcluster.tools import Tools
from tests.support.ledgers import ledger_client

PASSWORD = b"seeded-faults"
REPLICATION = Replication(3, 3, 2, 2)
RUN_S = 8.0
WINDOW = 32
AWAIT_BOUND_S = 30.0  # every add and the recovery end well within this


async def inject_faults(
    cluster: Cluster, tools: Tools, rng: random.Random, until: float
) -> list[str]:
    topology = cluster.topology
    bookies = [b.name for b in topology.bookies]
    regions = list(topology.region_names)
    done: list[str] = []
    while time.monotonic() < until - 3.0:
        await asyncio.sleep(rng.uniform(0.5, 1.5))
        kind = rng.choice(["kill", "pause", "partition"])
        if kind == "partition":
            a, b = rng.sample(regions, 2)
            await wan.partition(topology, a, b)
            await asyncio.sleep(rng.uniform(0.5, 2.0))
            await wan.heal(topology, a, b)
            done.append(f"partition {a}<->{b}")
            continue
        name = rng.choice(bookies)
        await controller.fault(cluster, tools, kind, name)
        await asyncio.sleep(rng.uniform(0.5, 2.0))
        await controller.fault(cluster, tools, "restart" if kind == "kill" else "resume", name)
        done.append(f"{kind} {name}")
    return done


@pytest.mark.parametrize("seed", [11, 12, 13])
async def test_seeded_bookie_faults_lose_nothing_and_never_stall(
    cluster: Cluster, tools: Tools, seed: int
) -> None:
    rng = random.Random(seed)
    acked: dict[int, bytes] = {}
    slowest = 0.0
    until = time.monotonic() + RUN_S
    async with ledger_client(cluster, "us-east", add_timeout_s=2.0) as east:
        writer = await east.create(REPLICATION, PASSWORD)
        faults = asyncio.create_task(inject_faults(cluster, tools, rng, until))
        outstanding: list[tuple[float, bytes, asyncio.Future[int]]] = []
        index = 0
        try:
            while time.monotonic() < until or outstanding:
                if time.monotonic() < until and len(outstanding) < WINDOW:
                    await asyncio.wait_for(writer.wait_for_room(), AWAIT_BOUND_S)
                    payload = f"seed{seed}-{index}".encode()
                    outstanding.append((time.monotonic(), payload, writer.append(payload)))
                    index += 1
                    continue
                sent, payload, future = outstanding.pop(0)
                entry_id = await asyncio.wait_for(future, AWAIT_BOUND_S)
                slowest = max(slowest, time.monotonic() - sent)
                acked[entry_id] = payload
        finally:
            done = await faults
            await wan.heal(cluster.topology)
        await writer.abandon()
    async with ledger_client(cluster, "eu-west") as west:
        reader = await asyncio.wait_for(
            west.open(writer.ledger_id, PASSWORD, recover_ledger=True), AWAIT_BOUND_S
        )
        assert reader.lac >= max(acked)
        for first in range(0, max(acked) + 1, 500):
            last = min(first + 499, max(acked))
            bodies = await reader.read_entries(first, last)
            for entry_id, body in zip(range(first, last + 1), bodies, strict=True):
                if entry_id in acked:
                    assert body == acked[entry_id], f"entry {entry_id} changed"
        ensembles = [tuple(e.bookies) for e in reader.metadata.ensembles]
    assert all(a != b for a, b in itertools.pairwise(ensembles)), ensembles
    print(
        f"seed {seed}: {len(acked)} entries acknowledged, all read back after recovery; "
        f"faults {done}; {len(ensembles)} ensembles; slowest add {slowest:.2f} s"
    )
    assert len(acked) == index, "every append was acknowledged: the writer never died"
