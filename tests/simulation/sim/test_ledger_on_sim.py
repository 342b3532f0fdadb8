"""globelog's real ledger client (drivers, bookie connections, codecs, placement) on the
simulated world. A writer in us-east pipelines adds while a bookie crashes (an ensemble change
or not, as the seed times it); then the writer either crashes or is paused and comes back after
another region's client recovered the ledger (a zombie that must find itself fenced).

Checked: each acknowledged entry was, at its acknowledgement, held by at least the ack quorum
of bookies spanning `min_regions_for_durability` regions; every acknowledged entry is in the
recovered ledger, which reads back whole and in order; every ensemble keeps the region rule.
With each of the ledger's broken variants switched on (core.runtime) the same runs must find
a violation within a few seeds, so these checks can fail in production code. Seeds replay."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from core import runtime
from core.errors import GlobelogError
from ledger import LedgerClient, LedgerConfig, LedgerHandleError
from ledger.codecs.metadata import LedgerMetadata, write_set_indices
from verify.sim.io.cluster import PASSWORD, Shape, SimCluster
from verify.sim.io.loop import run
from verify.sim.io.zookeeper import SimMetaStore

SEEDS = range(1, 13)
ENTRIES = 120
MIN_REGIONS = 2
# each broken variant is caught within this many seeds (of either scenario)
CAUGHT_WITHIN = 12
# three bookies a region: an ensemble of four could keep its ack quorum in one region
SHAPE = Shape(racks=3)


@dataclass
class Outcome:
    acknowledged: list[int] = field(default_factory=list)
    thin_acks: list[str] = field(default_factory=list)  # acked with too few copies or regions
    recovered: list[bytes] = field(default_factory=list)
    last_entry: int = -2
    ensembles: list[tuple[str, ...]] = field(default_factory=list)
    region_of: dict[str, str] = field(default_factory=dict)
    end_s: float = 0.0
    writer_stopped: bool = False
    recovery_error: str = ""

    def violations(self) -> list[str]:
        if self.recovery_error:
            return [f"the ledger could not be recovered: {self.recovery_error}"]
        found = list(self.thin_acks)
        acked = sorted(self.acknowledged)
        if acked != list(range(len(acked))):
            found.append(f"acknowledged out of order or with a gap: {acked[:20]}")
        lost = [e for e in acked if e > self.last_entry]
        if lost:
            found.append(f"acknowledged past the recovered end {self.last_entry}: {lost[:10]}")
        expected = [f"entry-{i}".encode() for i in range(self.last_entry + 1)]
        if self.recovered != expected:
            found.append("the recovered ledger does not read back whole and in order")
        for ensemble in self.ensembles:
            if len({self.region_of[b] for b in ensemble}) < MIN_REGIONS:
                found.append(f"ensemble {ensemble} spans fewer than {MIN_REGIONS} regions")
        return found


def config(region: str) -> LedgerConfig:
    return LedgerConfig(region=region, password=PASSWORD, min_regions_for_durability=MIN_REGIONS)


class LedgerRun:
    """One seed's run: the world, the writer, the recovery, and what they saw."""

    def __init__(self, seed: int) -> None:
        self.cluster = SimCluster(seed, SHAPE)
        self.loop = self.cluster.loop
        self.choices = random.Random(seed)
        self.writer_host = self.cluster.add_host("writer", "us-east")
        self.recovery_host = self.cluster.add_host("recovery", "eu-west")
        bookies = self.cluster.topology.bookies
        self.outcome = Outcome(region_of={b.bookie_id: b.region for b in bookies})
        self.created: asyncio.Future[int] = self.loop.create_future()
        self.replication = self.cluster.topology.replication

    def copies(self, ledger_id: int, entry: int) -> list[str]:
        """The regions of the bookies holding the entry now."""
        return [
            node.host.region
            for node in self.cluster.bookies.values()
            if node.server.bookie.holds(ledger_id, entry) is not None
        ]

    def acked(self, ledger_id: int, added: asyncio.Future[int]) -> None:
        if added.cancelled() or added.exception() is not None:
            return
        entry = added.result()
        self.outcome.acknowledged.append(entry)
        held = self.copies(ledger_id, entry)
        if len(held) < self.replication.ack_quorum or len(set(held)) < MIN_REGIONS:
            self.outcome.thin_acks.append(f"entry {entry} acknowledged with copies in {held}")

    async def write(self) -> None:
        store = await SimMetaStore.connect(self.cluster.ensemble)
        client = await LedgerClient.connect(store, config("us-east"))
        writer = await client.create(self.replication)
        self.created.set_result(writer.ledger_id)
        try:
            for entry in range(ENTRIES):
                await writer.wait_for_room()
                added = writer.append(f"entry-{entry}".encode())
                added.add_done_callback(lambda f: self.acked(writer.ledger_id, f))
                await asyncio.sleep(self.choices.uniform(0, 0.02))
        except LedgerHandleError:
            self.outcome.writer_stopped = True  # a zombie fenced (or its ledger closed) stops
        await asyncio.sleep(3600)  # lives on until the run ends (or it crashes)

    async def recover(self, ledger_id: int) -> None:
        store = await SimMetaStore.connect(self.cluster.ensemble)
        client = await LedgerClient.connect(store, config("eu-west"))
        try:
            reader = await client.open(ledger_id, recover_ledger=True)
        except GlobelogError as err:
            self.outcome.recovery_error = str(err)
            return
        self.outcome.last_entry = reader.metadata.last_entry_id
        self.outcome.ensembles = [e.bookies for e in reader.metadata.ensembles]
        for entry in range(reader.metadata.last_entry_id + 1):
            self.outcome.recovered.append(await reader.read_entry(entry))

    async def main(self, zombie: bool) -> None:
        loop, choices = self.loop, self.choices
        await self.cluster.start()
        loop.spawn(self.writer_host, self.write())
        ledger_id = await self.created
        await asyncio.sleep(choices.uniform(0.05, 1.0))
        crashed = choices.choice(sorted(self.cluster.bookies))
        self.cluster.crash_bookie(crashed, machine_up=choices.random() < 0.5)
        await asyncio.sleep(choices.uniform(0.1, 1.0))
        if zombie:
            loop.pause(self.writer_host)
        else:
            loop.crash(self.writer_host, machine_up=choices.random() < 0.5)
        async with asyncio.timeout(60):
            await loop.spawn(self.recovery_host, self.recover(ledger_id))
        if zombie:
            loop.resume(self.writer_host)
            await asyncio.sleep(3.0)  # its adds in flight and the ones it still sends
        self.outcome.end_s = loop.time()


def simulate(seed: int, *, zombie: bool) -> Outcome:
    ledger_run = LedgerRun(seed)
    run(ledger_run.loop, ledger_run.main(zombie))
    return ledger_run.outcome


@pytest.mark.parametrize("zombie", [False, True], ids=["writer-crashed", "writer-zombie"])
@pytest.mark.parametrize("seed", SEEDS)
def test_every_acknowledged_entry_is_durable_and_survives_recovery(seed: int, zombie: bool) -> None:
    outcome = simulate(seed, zombie=zombie)
    assert outcome.violations() == []
    assert len(outcome.acknowledged) > 10, "the run wrote too little to judge"


def test_a_seed_replays_exactly() -> None:
    first, again = simulate(7, zombie=True), simulate(7, zombie=True)
    assert (first.acknowledged, first.end_s, first.ensembles) == (
        again.acknowledged,
        again.end_s,
        again.ensembles,
    )


@pytest.mark.parametrize(
    "fault", [runtime.ACK_AT_ONE_COPY, runtime.SKIP_FENCING, runtime.IGNORE_REGIONS]
)
def test_each_broken_variant_of_the_ledger_is_caught(fault: str) -> None:
    tried = 0
    with runtime.breaking(fault):
        for seed in range(1, CAUGHT_WITHIN + 1):
            tried += 1
            if simulate(seed, zombie=True).violations():
                break
        else:
            pytest.fail(f"{fault}: no violation in {CAUGHT_WITHIN} seeds")
    assert not runtime.broken(fault)
    print(f"{fault}: caught at seed {tried}")


@pytest.mark.parametrize("fault", ["paused", "lost"])
def test_a_silent_bookie_with_nowhere_to_go_is_waited_for_not_fatal(fault: str) -> None:
    """Every bookie is in the ensemble (E = 6 of 6) and one falls silent: paused for 1.5 s
    (past the quorum lag, short of the add timeout), or lost for 3 s (its process down, its
    machine refusing connections: a failure with no answer from the bookie). Placement has no
    bookie to move its copies to; the writer waits for it (paused) or asks again after a wait
    (lost) instead of failing, and every add completes. Before, a lost one failed the handle,
    and the stream's next owner recovered its segment from the same bookies."""
    shape = Shape(racks=2, ensemble_size=6, write_quorum=3, ack_quorum=3)
    cluster = SimCluster(3 if fault == "paused" else 4, shape)
    loop = cluster.loop
    writer_host = cluster.add_host("writer", "us-east")
    done: dict[str, object] = {}

    async def write() -> None:
        store = await SimMetaStore.connect(cluster.ensemble)
        client = await LedgerClient.connect(store, config("us-east"))
        writer = await client.create(cluster.topology.replication)
        first = [await writer.add(f"before-{i}".encode()) for i in range(6)]
        silent = sorted(cluster.bookies)[0]
        if fault == "paused":
            loop.pause(cluster.bookies[silent].host)
            loop.call_later(1.5, loop.resume, cluster.bookies[silent].host)
        else:
            cluster.crash_bookie(silent, machine_up=True)
            loop.call_later(3.0, cluster.restart_bookie, silent)
        added = [writer.append(f"during-{i}".encode()) for i in range(12)]
        async with asyncio.timeout(60):
            done["entries"] = [*first, *await asyncio.gather(*added)]
        done["ensembles"] = len(writer.metadata.ensembles)

    async def main() -> None:
        await cluster.start()
        await loop.spawn(writer_host, write())

    run(loop, main())
    assert done["entries"] == list(range(18)), done
    assert done["ensembles"] == 1, "a change was written with no bookie to change to"


class WriterThenRecovery:
    """A writer in us-east adds `entries` and dies with its machine; `fault` then strikes
    (given the ledger's last ensemble) and a client in eu-west recovers the ledger."""

    def __init__(self, cluster: SimCluster, entries: int) -> None:
        self.cluster = cluster
        self.entries = entries
        self.writer_host = cluster.add_host("writer", "us-east")
        self.recovery_host = cluster.add_host("recovery", "eu-west")
        self.ledger_id = -1
        self.ensemble: tuple[str, ...] = ()
        self.recovery_s = -1.0
        self.closed: LedgerMetadata | None = None
        self.read: list[bytes] = []

    async def _write(self) -> None:
        store = await SimMetaStore.connect(self.cluster.ensemble)
        client = await LedgerClient.connect(store, config("us-east"))
        writer = await client.create(self.cluster.topology.replication)
        for i in range(self.entries):
            await writer.add(f"entry-{i}".encode())
        self.ledger_id = writer.ledger_id
        self.ensemble = writer.metadata.ensembles[-1].bookies

    async def _recover(self) -> None:
        loop = self.cluster.loop
        store = await SimMetaStore.connect(self.cluster.ensemble)
        client = await LedgerClient.connect(store, config("eu-west"))
        started = loop.time()
        reader = await client.open(self.ledger_id, recover_ledger=True)
        self.recovery_s = loop.time() - started
        self.closed = reader.metadata
        self.read = [await reader.read_entry(e) for e in range(reader.metadata.last_entry_id + 1)]

    def run(self, fault: Callable[[tuple[str, ...]], None]) -> None:
        loop = self.cluster.loop

        async def main() -> None:
            await self.cluster.start()
            await loop.spawn(self.writer_host, self._write())
            loop.crash(self.writer_host, machine_up=False)
            fault(self.ensemble)
            async with asyncio.timeout(60):
                await loop.spawn(self.recovery_host, self._recover())

        run(loop, main())
        assert self.read == [f"entry-{i}".encode() for i in range(self.entries)], self.read


def test_a_recovery_asks_a_lost_bookie_again_after_a_wait_when_there_is_no_spare() -> None:
    """E = 6 of 6 (no spare bookie): the writer dies and a bookie of the last entry's write
    set is down for 3 s, its machine refusing connections (which its connection, backing
    off, fails at once). The recovery waits and asks again, 0.1 s doubling to 2 s, rather than
    spending its 64 ensemble changes in a fifth of a second; it closes once the bookie is back."""
    cluster = SimCluster(4, Shape(racks=2, ensemble_size=6, write_quorum=3, ack_quorum=3))
    scenario = WriterThenRecovery(cluster, entries=6)

    def lose_one(ensemble: tuple[str, ...]) -> None:
        lost_id = ensemble[write_set_indices(5, len(ensemble), 3)[-1]]
        lost = next(name for name, node in cluster.bookies.items() if node.bookie_id == lost_id)
        cluster.crash_bookie(lost, machine_up=True)
        cluster.loop.call_later(3.0, cluster.restart_bookie, lost)

    scenario.run(lose_one)
    assert scenario.closed is not None and scenario.closed.last_entry_id == 5


def test_a_recovery_moves_a_silent_regions_copy_within_the_quorum_lag(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A writer's ledger (E/W/A 4/4/3, two regions per ack quorum) has one copy in a region
    whose bookies all go silent (a cut: paused, no answer) as the writer dies. The recovery
    from another region re-adds to the whole write quorum: the silent bookie is replaced once
    it has lagged the others by the quorum lag, by a bookie outside its region (its region
    mate is silent too), and the recovery ends long before the 5 s add timeout."""
    cluster = SimCluster(5, Shape())
    region_of = {b.bookie_id: b.region for b in cluster.topology.bookies}
    scenario = WriterThenRecovery(cluster, entries=10)
    cut: list[str] = []

    def cut_a_lone_region(ensemble: tuple[str, ...]) -> None:
        counts = {r: sum(region_of[b] == r for b in ensemble) for r in set(region_of.values())}
        cut.append(next(r for r in sorted(counts) if counts[r] == 1 and r != "eu-west"))
        for node in cluster.bookies.values():
            if node.host.region == cut[0]:
                cluster.loop.pause(node.host)

    with caplog.at_level(logging.INFO, logger="ledger.drivers.recover"):
        scenario.run(cut_a_lone_region)
    assert scenario.closed is not None
    last = scenario.closed.ensembles[-1].bookies
    assert cut[0] not in {region_of[b] for b in last}, (cut, last)
    assert len({region_of[b] for b in last}) >= MIN_REGIONS, last
    assert scenario.recovery_s < 2.5, scenario.recovery_s
    changes = [r.getMessage() for r in caplog.records if "recovery re-adds from" in r.getMessage()]
    assert len(changes) == 1, changes  # not first to the silent bookie's region mate
