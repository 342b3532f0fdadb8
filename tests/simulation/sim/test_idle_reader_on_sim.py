"""What a tailing reader of an idle stream costs, on the simulated world with globelog's real
reader, writer and ledger drivers: over two idle minutes it makes under one ZooKeeper read,
one long poll and one LAC ask a second, and a record written after the quiet still reaches it
promptly.

A read proxy keeps a tailing reader per stream it serves (up to `cache_streams_max`); one that
read the segment's metadata after every 200 ms poll, the ledger's every second and asked three
bookies for their LACs every second cost 65 % of a read proxy's core for 150 idle streams
(docs/benchmarks.md). The bounds sit above what the reader does now (a poll every 2 s, its
checks every 5 s: 38 ZooKeeper reads, 57 polls, 57 asks here) and far below what it did (737,
527, 315)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from core.records import Record
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient, LedgerConfig
from ledger.connections.bookie_client import BookieClient
from reader.log_reader import LogReader
from verify.sim.io.cluster import PASSWORD, SimCluster
from verify.sim.io.loop import Host, run
from verify.sim.io.zookeeper import SimMetaStore
from writer.log_writer import LogWriter, WriterConfig

pytestmark = pytest.mark.simulation
IDLE_S = 120.0
# per idle second, at most (the reader before: ZooKeeper 6, long polls 5, LAC asks 3)
ZOOKEEPER_READS_PER_S = 1.0
LONG_POLLS_PER_S = 1.0
LAC_ASKS_PER_S = 1.0
DELIVERED_WITHIN_S = 3.0  # a record written after the quiet, from its acknowledgement


class CountingStore(SimMetaStore):
    """The reader's metadata store, counting its reads."""

    reads = 0

    async def get(self, path: str):  # type: ignore[no-untyped-def]
        CountingStore.reads += 1
        return await super().get(path)

    async def sync(self, path: str) -> None:
        CountingStore.reads += 1
        await super().sync(path)


async def scenario(cluster: SimCluster, calls: Counter[str]) -> dict[str, float]:
    loop = cluster.loop
    writer_host = cluster.add_host("wp-us-east", "us-east")
    reader_host = cluster.add_host("rp-us-west", "us-west")
    await cluster.start()
    found: dict[str, float] = {}
    written = asyncio.Event()
    idle_over = asyncio.Event()

    async def ledger_client(host: Host, store: SimMetaStore) -> LedgerClient:
        config = LedgerConfig(region=host.region, password=PASSWORD, min_regions_for_durability=2)
        return await LedgerClient.connect(store, config)

    async def write() -> None:
        store = await SimMetaStore.connect(cluster.ensemble)
        streams = StreamMetaStore(store, "ns")
        ledgers = await ledger_client(writer_host, store)
        await streams.create_stream("s")
        config = WriterConfig(
            region="us-east", replication=cluster.topology.replication, owner=writer_host.name
        )
        writer = await LogWriter.open(streams, ledgers, "s", config)
        await writer.write(Record(b"first"))
        written.set()
        await idle_over.wait()
        await writer.write(Record(b"after the quiet"))
        found["acked_at"] = loop.time()
        await asyncio.sleep(3600)

    async def read() -> None:
        store = await CountingStore.connect(cluster.ensemble)
        streams = StreamMetaStore(store, "ns")
        ledgers = await ledger_client(reader_host, store)
        await written.wait()
        reader = await LogReader.open(streams, ledgers, "s")
        async with reader:
            first = await reader.read_next(timeout_s=30)
            assert first is not None and first.payload == b"first"
            await asyncio.sleep(5)  # the reader settles at the end of the stream
            before = CountingStore.reads, Counter(calls)
            await asyncio.sleep(IDLE_S)
            found["zookeeper"] = CountingStore.reads - before[0]
            for name in ("long_poll", "last_entry"):
                found[name] = calls[name] - before[1][name]
            idle_over.set()
            after = await reader.read_next(timeout_s=30)
            assert after is not None and after.payload == b"after the quiet"
            found["delivered_at"] = loop.time()

    loop.spawn(writer_host, write())
    async with asyncio.timeout(IDLE_S + 120):
        await loop.spawn(reader_host, read())
    return found


def test_a_reader_of_an_idle_stream_costs_a_few_requests_a_minute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: Counter[str] = Counter()
    long_poll, last_entry = BookieClient.read_lac_long_poll, BookieClient.read_last_entry

    async def counted_long_poll(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls["long_poll"] += 1
        return await long_poll(self, *args, **kwargs)

    async def counted_last_entry(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls["last_entry"] += 1
        return await last_entry(self, *args, **kwargs)

    monkeypatch.setattr(BookieClient, "read_lac_long_poll", counted_long_poll)
    monkeypatch.setattr(BookieClient, "read_last_entry", counted_last_entry)
    CountingStore.reads = 0
    cluster = SimCluster(7)
    found = run(cluster.loop, scenario(cluster, calls))
    print(found)
    assert found["zookeeper"] <= ZOOKEEPER_READS_PER_S * IDLE_S
    assert found["long_poll"] <= LONG_POLLS_PER_S * IDLE_S
    assert found["last_entry"] <= LAC_ASKS_PER_S * IDLE_S
    assert found["long_poll"] > 0  # it was following
    assert found["delivered_at"] - found["acked_at"] <= DELIVERED_WITHIN_S
