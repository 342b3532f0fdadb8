"""The ledger client on real bookies: tailing, explicit LAC, digests, refusals, delete."""

from __future__ import annotations

import asyncio

import pytest

from cli.cluster.controller import Cluster
from core.topology import Replication
from ledger.entry import DigestType
from ledger.handle_errors import LedgerUnauthorizedError, ReadBeyondLacError
from ledger.metadata_store import NoSuchLedgerMetadataError
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
