"""globelog's real ledger client (drivers, bookie connections, codecs, placement) on the
simulated world: a writer in one region pipelines adds while a bookie crashes (an ensemble
change, or not, as the seed times it), then the writer's host crashes; a client in another
region recovers the ledger. Every acknowledged entry must be in it, in order, and the ledger's
every ensemble must keep the region rule. Seeds replay exactly."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import pytest

from ledger import LedgerClient, LedgerConfig
from verify.sim.io.cluster import PASSWORD, SimCluster
from verify.sim.io.loop import run
from verify.sim.io.zookeeper import SimMetaStore

SEEDS = range(1, 25)
ENTRIES = 120


@dataclass
class Outcome:
    acknowledged: list[int] = field(default_factory=list)
    recovered: list[bytes] = field(default_factory=list)
    last_entry: int = -2
    ensembles: list[tuple[str, ...]] = field(default_factory=list)
    crashed_bookie: str = ""
    end_s: float = 0.0


def config(region: str) -> LedgerConfig:
    return LedgerConfig(region=region, password=PASSWORD, min_regions_for_durability=2)


def simulate(seed: int) -> Outcome:
    cluster = SimCluster(seed)
    loop = cluster.loop
    choices = random.Random(seed)
    writer_host = cluster.add_host("writer", "us-east")
    recovery_host = cluster.add_host("recovery", "eu-west")
    outcome = Outcome()
    created: asyncio.Future[int] = loop.create_future()

    async def write() -> None:
        store = await SimMetaStore.connect(cluster.ensemble)
        client = await LedgerClient.connect(store, config("us-east"))
        writer = await client.create(cluster.topology.replication)
        created.set_result(writer.ledger_id)
        for entry in range(ENTRIES):
            await writer.wait_for_room()
            added = writer.append(f"entry-{entry}".encode())
            added.add_done_callback(
                lambda f: outcome.acknowledged.append(f.result()) if not f.exception() else None
            )
            await asyncio.sleep(choices.uniform(0, 0.01))
        await asyncio.get_running_loop().create_future()  # waits for its crash

    async def recover(ledger_id: int) -> None:
        store = await SimMetaStore.connect(cluster.ensemble)
        client = await LedgerClient.connect(store, config("eu-west"))
        reader = await client.open(ledger_id, recover_ledger=True)
        outcome.last_entry = reader.metadata.last_entry_id
        outcome.ensembles = [e.bookies for e in reader.metadata.ensembles]
        for entry in range(reader.metadata.last_entry_id + 1):
            outcome.recovered.append(await reader.read_entry(entry))

    async def main() -> None:
        await cluster.start()
        loop.spawn(writer_host, write())
        ledger_id = await created
        await asyncio.sleep(choices.uniform(0.05, 1.5))
        outcome.crashed_bookie = choices.choice(sorted(cluster.bookies))
        cluster.crash_bookie(outcome.crashed_bookie, machine_up=choices.random() < 0.5)
        await asyncio.sleep(choices.uniform(0.1, 3.0))
        loop.crash(writer_host, machine_up=choices.random() < 0.5)
        async with asyncio.timeout(60):
            await loop.spawn(recovery_host, recover(ledger_id))
        outcome.end_s = loop.time()

    run(loop, main())
    return outcome


@pytest.mark.parametrize("seed", SEEDS)
def test_every_acknowledged_entry_survives_a_bookie_and_the_writer_crashing(seed: int) -> None:
    outcome = simulate(seed)
    acked = sorted(outcome.acknowledged)
    assert acked == list(range(len(acked))), "acknowledged out of order or with a gap"
    assert outcome.last_entry >= (acked[-1] if acked else -1), outcome
    assert outcome.recovered == [f"entry-{i}".encode() for i in range(outcome.last_entry + 1)]
    topology = SimCluster(seed).topology
    region_of = {b.bookie_id: b.region for b in topology.bookies}
    for ensemble in outcome.ensembles:
        assert len({region_of[b] for b in ensemble}) >= 2, outcome.ensembles


def test_a_seed_replays_exactly() -> None:
    first, again = simulate(7), simulate(7)
    assert (first.acknowledged, first.end_s, first.ensembles) == (
        again.acknowledged,
        again.end_s,
        again.ensembles,
    )
