"""The ledger client on real bookies: tailing, explicit LAC, digests, refusals, delete."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from core.topology import Replication
from global_meta import MetaStore
from ledger.codecs.entry import DigestType, EntryCodec, master_key
from ledger.drivers.client import LedgerClient
from ledger.drivers.context import LedgerConfig
from ledger.errors import (
    LedgerFencedError,
    LedgerUnauthorizedError,
    NoSuchLedgerMetadataError,
    ReadBeyondLacError,
)
from localcluster.controller import Cluster
from tests.support.ledgers import ledger_client

PASSWORD = b"client-secret"
REPLICATION = Replication(3, 3, 2, 2)


async def test_lac_trails_by_one_until_an_explicit_lac(cluster: Cluster) -> None:
    async with (
        ledger_client(cluster, "us-east") as writer_client,
        ledger_client(cluster, "us-west") as readers,
    ):
        writer = await writer_client.create(REPLICATION, PASSWORD)
        for i in range(5):
            await writer.add(f"e{i}".encode())
        reader = await readers.open(writer.ledger_id, PASSWORD)
        assert await reader.read_lac() == 3  # entry 4 carried the LAC of its time: 3
        with pytest.raises(ReadBeyondLacError, match="entry 4 is beyond the LAC 3"):
            await reader.read_entry(4)
        assert await writer.write_explicit_lac() == 4
        assert await reader.read_explicit_lac() == 4
        assert await reader.read_entry(4) == b"e4"
        await writer.close()


async def test_a_tailing_reader_long_polls_the_next_entry(cluster: Cluster) -> None:
    async with (
        ledger_client(cluster, "us-east", explicit_lac_interval_s=0.1) as writer_client,
        ledger_client(cluster, "eu-west") as readers,
    ):
        writer = await writer_client.create(REPLICATION, PASSWORD)
        reader = await readers.open(writer.ledger_id, PASSWORD)
        assert await reader.wait_for_entry(timeout_ms=300) is None  # nothing yet: times out
        seen = []
        for i in range(3):
            waiting = asyncio.ensure_future(reader.wait_for_entry(timeout_ms=5000))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            await writer.add(f"tail-{i}".encode())
            seen.append(await asyncio.wait_for(waiting, 10))
        assert seen == [(0, b"tail-0"), (1, b"tail-1"), (2, b"tail-2")]
        await writer.close()
        closed = await readers.open(writer.ledger_id, PASSWORD)
        assert await closed.wait_for_entry() is None  # a closed ledger has no next entry


@pytest.mark.parametrize("digest", [DigestType.CRC32, DigestType.HMAC, DigestType.CRC32C])
async def test_every_digest_type_round_trips(cluster: Cluster, digest: DigestType) -> None:
    async with ledger_client(cluster, "us-west", digest_type=digest) as client:
        writer = await client.create(REPLICATION, PASSWORD)
        payloads = [bytes([i]) * (i * 100) for i in range(12)]
        await asyncio.gather(*(writer.add(p) for p in payloads))
        await writer.close()
        reader = await client.open(writer.ledger_id, PASSWORD)
        assert reader.metadata.digest_type is digest
        assert await reader.read_entries(0, 11) == payloads


async def test_wrong_password_and_deleted_ledgers_are_refused(cluster: Cluster) -> None:
    async with ledger_client(cluster, "us-east") as client:
        writer = await client.create(REPLICATION, PASSWORD)
        await writer.add(b"x")
        await writer.close()
        with pytest.raises(LedgerUnauthorizedError, match="password does not match"):
            await client.open(writer.ledger_id, b"wrong")
        await client.delete(writer.ledger_id)
        with pytest.raises(NoSuchLedgerMetadataError, match=f"ledger {writer.ledger_id}"):
            await client.open(writer.ledger_id, PASSWORD)


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    return points


async def test_the_client_records_opentelemetry_metrics(cluster: Cluster) -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    config = LedgerConfig.of(cluster.topology, "us-east", min_regions_for_durability=2)
    async with (
        await MetaStore.of(cluster.topology) as store,
        await LedgerClient.connect(store, config, meter=meter) as client,
    ):
        writer = await client.create(REPLICATION, PASSWORD)
        await asyncio.gather(*(writer.add(f"m{i}".encode()) for i in range(20)))
        opened = await client.open(writer.ledger_id, PASSWORD, recover_ledger=True)
        assert await opened.read_entries(0, 19) == [f"m{i}".encode() for i in range(20)]
        assert await opened.read_entry(7) == b"m7"
        # entry 19 was past the LAC (18, which it carried): the recovery read it, and its
        # reader serves it from memory, with no read of its own
        assert await opened.read_entry(19) == b"m19"
        with pytest.raises(LedgerFencedError):
            await writer.add(b"fenced")
    points = metric_points(reader)
    assert sum(p.value for p in points["globelog.ledger.adds"]) == 20
    [latency] = points["globelog.ledger.add.latency"]
    assert latency.count == 20 and latency.min > 0
    # the range is read with batched reads (E = W), one entry alone with a single read
    assert sum(p.value for p in points["globelog.ledger.batch_read.entries"]) == 20
    assert points["globelog.ledger.batch_read.latency"][0].count >= 1
    assert points["globelog.ledger.read.latency"][0].count == 1
    [recovery] = points["globelog.ledger.recoveries"]
    assert recovery.value == 1 and dict(recovery.attributes) == {"outcome": "closed"}
    failures = {p.attributes["code"]: p.value for p in points["globelog.ledger.add.failures"]}
    assert failures == {"ledger_fenced": 1}


async def test_batched_reads_pass_over_gaps_and_corrupt_copies(cluster: Cluster) -> None:
    """Every bookie's copy is flawed somewhere, differently; the range still reads right."""
    async with ledger_client(cluster, "us-east") as client:
        writer = await client.create(REPLICATION, PASSWORD)
        ledger_id, metadata = writer.ledger_id, writer.metadata
        codec = EntryCodec(ledger_id, metadata.digest_type, PASSWORD)
        payloads = [f"entry {e} ".encode() * (e + 1) for e in range(30)]
        packets, length = [], 0
        for entry_id, payload in enumerate(payloads):
            length += len(payload)
            packets.append(codec.encode_entry(entry_id, entry_id - 1, length, payload))
        gap, corrupt, short = metadata.current_ensemble
        flaws = {gap: range(10, 15), short: range(25, 30)}  # entries each one never gets
        for bookie in metadata.current_ensemble:
            for entry_id, intact in enumerate(packets):
                if entry_id in flaws.get(bookie, ()):
                    continue
                stored = intact
                if bookie == corrupt and entry_id == 20:
                    stored = intact[:-1] + bytes([intact[-1] ^ 0xFF])  # fails its digest
                await asyncio.wait_for(
                    client.context.bookies.add_entry(
                        bookie, ledger_id, entry_id, master_key(PASSWORD), stored
                    ),
                    10,
                )
        opened = await client.open(ledger_id, PASSWORD, recover_ledger=True)
        assert opened.lac == 29
        assert await asyncio.wait_for(opened.read_entries(0, 29), 30) == payloads
        assert await asyncio.wait_for(opened.read_entries(12, 21), 30) == payloads[12:22]
