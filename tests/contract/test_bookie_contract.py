"""One set of cases, two bookies: the simulated one (verify/sim/bookie.py, which the failover
simulation and the ledger simulation store through) and a real BookKeeper bookie of the
local cluster, reached with globelog's BookieClient. A case that passes against one and
fails against the other is a fake that lies.

Each case works on a fresh random ledger id. Answers are compared as the simulation sees
them: a stored entry (lac, length, payload) or a BookieFailure.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Protocol

import pytest

from cli.cluster.controller import Cluster
from core.routes import publish_topology
from ledger.bookie_client import BookieClient
from ledger.entry import DigestType, EntryCodec, master_key
from ledger.errors import FencedError, NoSuchEntryError, NoSuchLedgerError
from ledger.signals import BookieFailure
from verify.sim.bookie import SimBookie, StoredEntry

PASSWORD = b"globelog-contract"
KEY = master_key(PASSWORD)
GUARD_S = 15.0

Answer = tuple[int, int, bytes] | BookieFailure  # (lac, length, payload) or a failure


class BookieUnderTest(Protocol):
    async def add(
        self, ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes, recovery: bool
    ) -> BookieFailure | None: ...

    async def read(self, ledger_id: int, entry_id: int, fence: bool) -> Answer: ...

    async def read_last(
        self, ledger_id: int, fence: bool
    ) -> tuple[int, Answer] | BookieFailure: ...


class Simulated:
    def __init__(self) -> None:
        self.bookie = SimBookie("sim")

    async def add(
        self, ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes, recovery: bool
    ) -> BookieFailure | None:
        return self.bookie.add(
            ledger_id, entry_id, StoredEntry(lac, length, payload), recovery=recovery
        )

    async def read(self, ledger_id: int, entry_id: int, fence: bool) -> Answer:
        found = self.bookie.read(ledger_id, entry_id, fence=fence)
        return found if isinstance(found, BookieFailure) else (found.lac, found.length, found.body)

    async def read_last(self, ledger_id: int, fence: bool) -> tuple[int, Answer] | BookieFailure:
        found = self.bookie.read_last(ledger_id, fence=fence)
        if isinstance(found, BookieFailure):
            return found
        entry_id, stored = found
        return entry_id, (stored.lac, stored.length, stored.body)


class Real:
    def __init__(self, client: BookieClient, bookie_id: str) -> None:
        self.client, self.bookie_id = client, bookie_id
        self.codecs: dict[int, EntryCodec] = {}

    def codec(self, ledger_id: int) -> EntryCodec:
        return self.codecs.setdefault(ledger_id, EntryCodec(ledger_id, DigestType.CRC32C, PASSWORD))

    async def add(
        self, ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes, recovery: bool
    ) -> BookieFailure | None:
        packet = self.codec(ledger_id).encode_entry(entry_id, lac, length, payload)
        try:
            async with asyncio.timeout(GUARD_S):
                await self.client.add_entry(
                    self.bookie_id, ledger_id, entry_id, KEY, packet, recovery=recovery
                )
        except FencedError:
            return BookieFailure.FENCED
        return None

    async def read(self, ledger_id: int, entry_id: int, fence: bool) -> Answer:
        try:
            async with asyncio.timeout(GUARD_S):
                response = await self.client.read_entry(
                    self.bookie_id, ledger_id, entry_id, fence, KEY if fence else None
                )
        except NoSuchEntryError:
            return BookieFailure.NO_SUCH_ENTRY
        except NoSuchLedgerError:
            return BookieFailure.NO_SUCH_LEDGER
        assert response.body is not None
        entry = self.codec(ledger_id).decode_entry(response.body, entry_id)
        return entry.lac, entry.length, bytes(entry.payload)

    async def read_last(self, ledger_id: int, fence: bool) -> tuple[int, Answer] | BookieFailure:
        try:
            async with asyncio.timeout(GUARD_S):
                response = await self.client.read_last_entry(
                    self.bookie_id, ledger_id, fence, KEY if fence else None
                )
        except NoSuchEntryError:
            return BookieFailure.NO_SUCH_ENTRY
        except NoSuchLedgerError:
            return BookieFailure.NO_SUCH_LEDGER
        assert response.body is not None
        entry = self.codec(ledger_id).decode_last_entry(response.body)
        return entry.entry_id, (entry.lac, entry.length, bytes(entry.payload))


@pytest.fixture
async def bookie(real_cluster: Cluster | None) -> AsyncIterator[BookieUnderTest]:
    if real_cluster is None:
        yield Simulated()
        return
    cluster = real_cluster
    target = cluster.topology.bookies[0]
    published = publish_topology(cluster.topology)
    async with BookieClient.for_region(published, target.region) as client:
        yield Real(client, target.bookie_id)


def fresh_ledger() -> int:
    return random.randrange(1 << 40)


async def test_an_added_entry_reads_back_with_its_lac_and_length(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    assert await bookie.add(ledger, 0, -1, 5, b"first", False) is None
    assert await bookie.add(ledger, 1, 0, 11, b"second", False) is None
    assert await bookie.read(ledger, 0, False) == (-1, 5, b"first")
    assert await bookie.read(ledger, 1, False) == (0, 11, b"second")


async def test_a_missing_entry_and_a_missing_ledger_are_told_apart(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    assert await bookie.add(ledger, 0, -1, 1, b"x", False) is None
    assert await bookie.read(ledger, 7, False) is BookieFailure.NO_SUCH_ENTRY
    assert await bookie.read(fresh_ledger(), 0, False) is BookieFailure.NO_SUCH_LEDGER
    assert await bookie.read_last(fresh_ledger(), False) is BookieFailure.NO_SUCH_LEDGER


async def test_read_last_answers_the_highest_entry_held(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    for entry_id in (0, 2, 1):  # out of order, with a gap filled last
        assert await bookie.add(ledger, entry_id, entry_id - 1, entry_id + 1, b"e", False) is None
    assert await bookie.read_last(ledger, False) == (2, (1, 3, b"e"))


async def test_a_fence_refuses_later_adds_but_not_recovery_adds(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    for entry_id in range(2):
        assert await bookie.add(ledger, entry_id, entry_id - 1, entry_id + 1, b"e", False) is None
    assert await bookie.read_last(ledger, True) == (1, (0, 2, b"e"))
    assert await bookie.add(ledger, 2, 1, 3, b"late", False) is BookieFailure.FENCED
    assert await bookie.read(ledger, 2, False) is BookieFailure.NO_SUCH_ENTRY, "nothing stored"
    assert await bookie.add(ledger, 2, 1, 3, b"recovered", True) is None
    assert await bookie.read(ledger, 2, False) == (1, 3, b"recovered")
    assert await bookie.add(ledger, 3, 2, 4, b"still late", False) is BookieFailure.FENCED


async def test_a_fencing_entry_read_fences_too(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    assert await bookie.add(ledger, 0, -1, 1, b"e", False) is None
    assert await bookie.read(ledger, 0, True) == (-1, 1, b"e")
    assert await bookie.add(ledger, 1, 0, 2, b"late", False) is BookieFailure.FENCED


async def test_fencing_a_ledger_the_bookie_never_held(bookie: BookieUnderTest) -> None:
    """Recovery fences every bookie of the ensemble, including ones that got no entry: the
    bookie answers that it holds none, and a zombie writer's first add there is refused."""
    ledger = fresh_ledger()
    assert await bookie.read_last(ledger, True) is BookieFailure.NO_SUCH_ENTRY
    assert await bookie.add(ledger, 0, -1, 1, b"zombie", False) is BookieFailure.FENCED


async def test_an_entry_added_again_is_accepted(bookie: BookieUnderTest) -> None:
    """A resend (or recovery writing back what it read) is answered OK. Which copy a later
    read returns is not part of the contract: the real bookie answered with the first one
    here, and globelog never adds different bytes under one entry id."""
    ledger = fresh_ledger()
    assert await bookie.add(ledger, 0, -1, 3, b"one", False) is None
    assert await bookie.add(ledger, 0, -1, 3, b"two", False) is None
    assert await bookie.read(ledger, 0, False) in ((-1, 3, b"one"), (-1, 3, b"two"))
