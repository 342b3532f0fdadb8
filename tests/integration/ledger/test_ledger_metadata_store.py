"""Ledger metadata in BookKeeper's own ZooKeeper layout, read back by BookKeeper's shell."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from global_meta import MetaStore
from ledger.codecs.entry import DigestType
from ledger.codecs.metadata import Ensemble, LedgerMetadata, LedgerState, ledger_path
from ledger.drivers.metadata_store import LedgerMetadataStore, VersionedMetadata
from ledger.errors import LedgerMetadataConflictError, NoSuchLedgerMetadataError
from localcluster.controller import Cluster
from localcluster.tools import Tools
from tests.support.bookkeeper_java import bookie_shell


@pytest.fixture
async def ledgers(cluster: Cluster) -> AsyncIterator[LedgerMetadataStore]:
    async with await MetaStore.of(cluster.topology) as store:
        yield LedgerMetadataStore(store)


def sample(cluster: Cluster) -> LedgerMetadata:
    bookies = tuple(region.bookies[0].bookie_id for region in cluster.topology.regions)
    return LedgerMetadata(
        3,
        3,
        2,
        (Ensemble(0, bookies),),
        DigestType.CRC32C,
        b"secret",
        ctime=1_700_000_000_000,
        custom_metadata=(("owner", b"globelog"),),
    )


async def test_create_read_and_compare_and_set(
    cluster: Cluster, ledgers: LedgerMetadataStore
) -> None:
    first = await ledgers.create(sample(cluster))
    second = await ledgers.create(sample(cluster))
    assert second.ledger_id > first.ledger_id
    read = await ledgers.read(first.ledger_id)
    assert read.metadata == sample(cluster) and read.version == 0

    closed = LedgerMetadata(
        3,
        3,
        2,
        read.metadata.ensembles,
        DigestType.CRC32C,
        b"secret",
        state=LedgerState.CLOSED,
        last_entry_id=9,
        length=1000,
        ctime=read.metadata.ctime,
        custom_metadata=read.metadata.custom_metadata,
    )
    written = await ledgers.write(read, closed)
    assert written.version == 1
    with pytest.raises(LedgerMetadataConflictError, match="changed since version 0"):
        await ledgers.write(read, closed)
    assert (await ledgers.read(first.ledger_id)).metadata.state is LedgerState.CLOSED

    await ledgers.delete(second.ledger_id)
    with pytest.raises(NoSuchLedgerMetadataError, match=ledger_path(second.ledger_id)):
        await ledgers.read(second.ledger_id)


async def test_bookkeeper_shell_reads_globelog_metadata(
    cluster: Cluster, tools: Tools, ledgers: LedgerMetadataStore
) -> None:
    created = await ledgers.create(sample(cluster))
    output = bookie_shell(cluster, tools, "ledgermetadata", "-ledgerid", str(created.ledger_id))
    line = next(x for x in output.splitlines() if "LedgerMetadata{" in x)
    bookies = ", ".join(sample(cluster).ensembles[0].bookies)
    assert "ensembleSize=3, writeQuorumSize=3, ackQuorumSize=2, state=OPEN" in line
    assert "digestType=CRC32C" in line
    assert f"ensembles={{0=[{bookies}]}}" in line
    listed = bookie_shell(cluster, tools, "listledgers")
    assert f"ledgerID: {created.ledger_id}" in listed


async def test_a_visit_of_every_ledger_runs_some_at_once_and_leaves_out_the_deleted(
    cluster: Cluster, ledgers: LedgerMetadataStore
) -> None:
    made = [(await ledgers.create(sample(cluster))).ledger_id for _ in range(12)]
    gone = made[-2]  # taken by a worker after the first visits began
    running, most = 0, 0

    async def visit(versioned: VersionedMetadata) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        if versioned.ledger_id == made[0]:
            await ledgers.delete(gone)  # deleted while the walk goes on
        await asyncio.sleep(0.05)
        running -= 1
        return versioned.version

    seen = await ledgers.visit(visit, [*made, 10**15], at_once=4)  # 10**15: never made
    assert most == 4
    assert list(seen) == [i for i in made if i != gone] and set(seen.values()) == {0}

    async def fail(versioned: VersionedMetadata) -> None:
        raise RuntimeError(f"visiting {versioned.ledger_id}")

    with pytest.raises(RuntimeError, match="visiting"):
        await ledgers.visit(fail, made[:2])
