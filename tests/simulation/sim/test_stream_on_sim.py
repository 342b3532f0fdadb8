"""globelog's real stream code on the simulated world: a producer writes idempotently through
the stream's writer in us-east (writer/, the ledger drivers); the writer's host crashes or is
paused; a writer in eu-west takes the stream over once the owner's session is gone (ownership
lock, fencing and recovery of the last segment) and the producer resends what it had no
acknowledgement for through the real idempotence code (region/idempotence/rebuild.py: the producer
table rebuilt from the stream's last records). A reader in us-west (reader/) then reads the
stream from its start.

Checked: every acknowledged record is read back, each producer sequence number once, in the
order the producer sent them. With the producer table forgotten at takeover (a broken variant
in the real code) the resends duplicate records, and the run must see it."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field

import pytest

from core import runtime
from core.errors import GlobelogError, OwnershipError, ReadTimeoutError
from core.records import Record
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient, LedgerConfig
from reader.log_reader import LogReader
from region.idempotence.rebuild import Idempotence, rebuild_table
from verify.sim.io.cluster import PASSWORD, SimCluster
from verify.sim.io.loop import Host, run
from verify.sim.io.zookeeper import SimMetaStore
from writer.events import Written
from writer.log_writer import LogWriter, WriterConfig

SEEDS = range(1, 11)
RECORDS = 60
PRODUCER = 0x51
STREAM = "s"
CAUGHT_WITHIN = 10


@dataclass
class Outcome:
    acknowledged: set[int] = field(default_factory=set)  # producer seqs
    read: list[int] = field(default_factory=list)  # producer seqs in stream order
    takeover_s: float = 0.0

    def violations(self) -> list[str]:
        found = []
        counts = Counter(self.read)
        doubled = sorted(seq for seq, n in counts.items() if n > 1)
        if doubled:
            found.append(f"producer seqs written twice: {doubled[:10]}")
        lost = sorted(self.acknowledged - set(counts))
        if lost:
            found.append(f"acknowledged and not read: {lost[:10]}")
        firsts = list(dict.fromkeys(self.read))
        if firsts != sorted(firsts):
            found.append("records out of the producer's order")
        return found


class StreamRun:
    def __init__(self, seed: int) -> None:
        self.cluster = SimCluster(seed)
        self.loop = self.cluster.loop
        self.choices = random.Random(seed)
        self.outcome = Outcome()
        self.replication = self.cluster.topology.replication

    async def open(self, host: Host) -> tuple[StreamMetaStore, LedgerClient]:
        store = await SimMetaStore.connect(self.cluster.ensemble)
        ledgers = await LedgerClient.connect(
            store, LedgerConfig(region=host.region, password=PASSWORD, min_regions_for_durability=2)
        )
        return StreamMetaStore(store, "ns"), ledgers

    async def take(self, host: Host, streams: StreamMetaStore, ledgers: LedgerClient) -> LogWriter:
        config = WriterConfig(region=host.region, replication=self.replication, owner=host.name)
        while True:
            try:
                return await LogWriter.open(streams, ledgers, STREAM, config)
            except OwnershipError:  # the old owner's session still holds the lock
                await asyncio.sleep(0.5)

    async def first_owner(self, host: Host) -> None:
        streams, ledgers = await self.open(host)
        await streams.create_stream(STREAM)
        writer = await self.take(host, streams, ledgers)
        try:
            for seq in range(RECORDS):
                await writer.wait_for_room()
                record = Record(f"r{seq}".encode(), producer=(PRODUCER, seq))
                written = writer.write_nowait(record)
                written.add_done_callback(lambda f, seq=seq: self._acked(f, seq))
                await asyncio.sleep(self.choices.uniform(0, 0.03))
        except GlobelogError:
            pass  # a paused owner back finds its session gone: it writes no more
        await asyncio.sleep(3600)  # lives on until the run ends (or it crashes)

    def _acked(self, written: asyncio.Future[object], seq: int) -> None:
        if not written.cancelled() and written.exception() is None:
            self.outcome.acknowledged.add(seq)

    async def second_owner(self, host: Host) -> None:
        """Takes the stream over, then the producer resends every record it has no ack for."""
        streams, ledgers = await self.open(host)
        started = self.loop.time()
        writer = await self.take(host, streams, ledgers)
        self.outcome.takeover_s = self.loop.time() - started
        idempotence = Idempotence(lambda: rebuild_table(streams, ledgers, STREAM, writer.next_seq))
        resend = [seq for seq in range(RECORDS) if seq not in self.outcome.acknowledged]
        keys = [(PRODUCER, seq) for seq in resend]

        async def write(todo: list[int]) -> list[Written]:
            records = [Record(f"r{resend[i]}".encode(), producer=keys[i]) for i in todo]
            return list(await writer.write_bulk(records))

        await idempotence.write_once(keys, write)
        self.outcome.acknowledged.update(resend)
        await writer.close()

    async def read(self, host: Host) -> None:
        streams, ledgers = await self.open(host)
        reader = await LogReader.open(streams, ledgers, STREAM)
        async with reader:
            while True:
                try:
                    record = await reader.read_next(timeout_s=3)
                except ReadTimeoutError:
                    return  # the end of what was written
                if record is None:
                    return
                assert record.producer_id == PRODUCER and record.producer_seq is not None
                self.outcome.read.append(record.producer_seq)

    async def main(self, paused: bool) -> None:
        loop, choices = self.loop, self.choices
        first = self.cluster.add_host("wp-us-east", "us-east")
        second = self.cluster.add_host("wp-eu-west", "eu-west")
        await self.cluster.start()
        loop.spawn(first, self.first_owner(first))
        await asyncio.sleep(choices.uniform(0.3, 2.0))
        if paused:
            loop.pause(first)  # SIGSTOP: its session expires while it sleeps
        else:
            loop.crash(first, machine_up=choices.random() < 0.5)
        async with asyncio.timeout(120):
            await loop.spawn(second, self.second_owner(second))
        if paused:
            loop.resume(first)  # it must find itself fenced: nothing more of it lands
            await asyncio.sleep(2.0)
        reader = self.cluster.add_host("reader", "us-west")
        async with asyncio.timeout(120):
            await loop.spawn(reader, self.read(reader))


def simulate(seed: int, *, paused: bool = False) -> Outcome:
    stream_run = StreamRun(seed)
    run(stream_run.loop, stream_run.main(paused))
    return stream_run.outcome


@pytest.mark.parametrize("paused", [False, True], ids=["owner-crashed", "owner-paused"])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_takeover_with_resends_keeps_every_record_once_and_in_order(
    seed: int, paused: bool
) -> None:
    outcome = simulate(seed, paused=paused)
    assert outcome.violations() == []
    assert len(outcome.read) >= RECORDS
    assert outcome.takeover_s > 0


def test_forgetting_the_producer_table_is_caught() -> None:
    with runtime.breaking(runtime.FORGET_PRODUCERS):
        for seed in range(1, CAUGHT_WITHIN + 1):
            try:
                if simulate(seed).violations():
                    print(f"{runtime.FORGET_PRODUCERS}: caught at seed {seed}")
                    return
            except GlobelogError:
                continue
    pytest.fail(f"{runtime.FORGET_PRODUCERS}: no violation in {CAUGHT_WITHIN} seeds")
