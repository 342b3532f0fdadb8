"""A ledger metadata write through a lost ZooKeeper connection: retried, a write that landed
recognised, and given up within its bound when ZooKeeper stays away (docs/design.md §5, I8)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from core import errors
from global_meta.store import NodeStat
from ledger.codecs.entry import DigestType
from ledger.codecs.metadata import Ensemble, LedgerMetadata, serialize_metadata
from ledger.drivers import metadata_store
from ledger.drivers.metadata_store import LedgerMetadataStore, VersionedMetadata

BOOKIES = ("127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183")
OPEN = LedgerMetadata(3, 3, 2, (Ensemble(0, BOOKIES),), DigestType.CRC32C, b"pw")
CHANGED = LedgerMetadata(
    3, 3, 2, (Ensemble(0, BOOKIES), Ensemble(5, BOOKIES[::-1])), DigestType.CRC32C, b"pw"
)


def stat(version: int) -> NodeStat:
    return NodeStat(version, 0, 0, 0, 0, 0, 0)


class FlakyStore:
    """A MetaStore whose `set` loses the connection: `landing` says whether the write
    nevertheless reached ZooKeeper; `away` keeps every call failing."""

    def __init__(self, landing: bool, away: bool = False) -> None:
        self.landing, self.away = landing, away
        self.data, self.version, self.sets = serialize_metadata(OPEN), 1, 0

    async def set(self, path: str, data: bytes, *, version: int) -> Any:
        self.sets += 1
        if self.landing and self.sets == 1:
            self.data, self.version = data, self.version + 1
        if self.away or self.sets == 1:
            raise errors.MetadataUnavailableError(f"set {path!r}: connection to ZooKeeper lost")
        if version != self.version:
            raise errors.BadVersionError(f"set {path!r}: version changed")
        self.data, self.version = data, self.version + 1
        return stat(self.version)

    async def get(self, path: str) -> tuple[bytes, NodeStat]:
        if self.away:
            raise errors.MetadataUnavailableError(f"get {path!r}: connection to ZooKeeper lost")
        return self.data, stat(self.version)


async def test_a_write_that_landed_before_the_connection_was_lost_is_recognised() -> None:
    store = FlakyStore(landing=True)
    written = await LedgerMetadataStore(store).write(VersionedMetadata(7, OPEN, 1), CHANGED)  # type: ignore[arg-type]
    assert (written.version, store.sets) == (2, 1), "not written twice, not a conflict"
    assert written.metadata == CHANGED


async def test_a_write_that_did_not_land_is_sent_again() -> None:
    store = FlakyStore(landing=False)
    written = await LedgerMetadataStore(store).write(VersionedMetadata(7, OPEN, 1), CHANGED)  # type: ignore[arg-type]
    assert (written.version, store.sets) == (2, 2)


async def test_zookeeper_staying_away_ends_the_write_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metadata_store, "UNAVAILABLE_RETRY_S", 0.5)
    store = FlakyStore(landing=False, away=True)
    started = time.monotonic()
    with pytest.raises(errors.MetadataUnavailableError):
        await asyncio.wait_for(
            LedgerMetadataStore(store).write(VersionedMetadata(7, OPEN, 1), CHANGED),  # type: ignore[arg-type]
            5.0,
        )
    assert time.monotonic() - started < 2.0
