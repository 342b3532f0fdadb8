"""One set of cases, two bookies: the simulated one (verify/sim/bookie.py, which the failover
simulation and the ledger simulation store through) and a real BookKeeper bookie of the
local cluster, reached with globelog's BookieClient. A case that passes against one and
fails against the other is a fake that lies; the real answers are the truth.

Each case works on fresh random ledger ids. Answers are compared as the simulation sees
them: a stored entry as (lac, length, payload), or a BookieFailure. The real adapter turns
the client's errors into failures with ledger.machines.signals.failure_kind, the drivers' own table,
and lets any other error (a timeout, a lost connection) fail the case.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable
from typing import Protocol, TypeVar

import pytest

from core.errors import GlobelogError
from core.routes import publish_topology
from ledger.codecs.entry import DigestType, EntryCodec, master_key
from ledger.connections.bookie_client import BookieClient
from ledger.machines.signals import BookieFailure, failure_kind
from localcluster.controller import Cluster
from tests.support import security
from verify.sim.bookie import SimBookie, StoredEntry

PASSWORD = b"globelog-contract"
KEY = master_key(PASSWORD)
GUARD_S = 15.0  # every await on the real bookie is bounded by this
# The answers the simulated bookie gives; any other failure of the real one is no answer.
ANSWERS = frozenset(
    {
        BookieFailure.FENCED,
        BookieFailure.NO_SUCH_LEDGER,
        BookieFailure.NO_SUCH_ENTRY,
        BookieFailure.READ_ONLY,
    }
)

Stored = tuple[int, int, bytes]  # (lac, length, payload)
T = TypeVar("T")


class BookieUnderTest(Protocol):
    async def add(
        self, ledger_id: int, entry_id: int, stored: Stored, *, recovery: bool = False
    ) -> BookieFailure | None: ...

    async def read(
        self, ledger_id: int, entry_id: int, *, fence: bool = False
    ) -> Stored | BookieFailure: ...

    async def read_last(
        self, ledger_id: int, *, fence: bool = False
    ) -> tuple[int, Stored] | BookieFailure: ...


# -- the simulated bookie ---------------------------------------------------------------------


class Simulated:
    def __init__(self) -> None:
        self.bookie = SimBookie("sim")

    async def add(
        self, ledger_id: int, entry_id: int, stored: Stored, *, recovery: bool = False
    ) -> BookieFailure | None:
        entry = StoredEntry(*stored)
        return self.bookie.add(ledger_id, entry_id, entry, recovery=recovery)

    async def read(
        self, ledger_id: int, entry_id: int, *, fence: bool = False
    ) -> Stored | BookieFailure:
        found = self.bookie.read(ledger_id, entry_id, fence=fence)
        return found if isinstance(found, BookieFailure) else (found.lac, found.length, found.body)

    async def read_last(
        self, ledger_id: int, *, fence: bool = False
    ) -> tuple[int, Stored] | BookieFailure:
        found = self.bookie.read_last(ledger_id, fence=fence)
        if isinstance(found, BookieFailure):
            return found
        entry_id, entry = found
        return entry_id, (entry.lac, entry.length, entry.body)


# -- the real bookie ----------------------------------------------------------------------------


class Real:
    def __init__(self, client: BookieClient, bookie_id: str) -> None:
        self.client, self.bookie_id = client, bookie_id
        self.codecs: dict[int, EntryCodec] = {}

    def codec(self, ledger_id: int) -> EntryCodec:
        if ledger_id not in self.codecs:
            self.codecs[ledger_id] = EntryCodec(ledger_id, DigestType.CRC32C, PASSWORD)
        return self.codecs[ledger_id]

    async def add(
        self, ledger_id: int, entry_id: int, stored: Stored, *, recovery: bool = False
    ) -> BookieFailure | None:
        packet = self.codec(ledger_id).encode_entry(entry_id, *stored)
        answer = self.client.add_entry(
            self.bookie_id, ledger_id, entry_id, KEY, packet, recovery=recovery
        )
        failure = await answered(answer)
        return failure if isinstance(failure, BookieFailure) else None

    async def read(
        self, ledger_id: int, entry_id: int, *, fence: bool = False
    ) -> Stored | BookieFailure:
        key = KEY if fence else None
        answer = await answered(
            self.client.read_entry(self.bookie_id, ledger_id, entry_id, fence, key)
        )
        if isinstance(answer, BookieFailure):
            return answer
        assert answer.body is not None, answer
        entry = self.codec(ledger_id).decode_entry(answer.body, entry_id)
        return entry.lac, entry.length, bytes(entry.payload)

    async def read_last(
        self, ledger_id: int, *, fence: bool = False
    ) -> tuple[int, Stored] | BookieFailure:
        key = KEY if fence else None
        answer = await answered(self.client.read_last_entry(self.bookie_id, ledger_id, fence, key))
        if isinstance(answer, BookieFailure):
            return answer
        assert answer.body is not None, answer
        entry = self.codec(ledger_id).decode_last_entry(answer.body)
        return entry.entry_id, (entry.lac, entry.length, bytes(entry.payload))


async def answered(request: Awaitable[T]) -> T | BookieFailure:
    """The request's result, or the bookie's definite refusal as the simulation names it."""
    try:
        async with asyncio.timeout(GUARD_S):
            return await request
    except GlobelogError as err:
        kind = failure_kind(err)
        if kind not in ANSWERS:
            raise
        return kind


@pytest.fixture
async def bookie(real_cluster: Cluster | None) -> AsyncIterator[BookieUnderTest]:
    if real_cluster is None:
        yield Simulated()
        return
    target = real_cluster.topology.bookies[0]
    published = publish_topology(real_cluster.topology)
    async with BookieClient.for_region(
        published, target.region, security.bookie_config()
    ) as client:
        yield Real(client, target.bookie_id)


def fresh_ledger() -> int:
    return random.randrange(1 << 40)


# -- the cases ----------------------------------------------------------------------------------


async def test_an_added_entry_reads_back_with_its_lac_and_length(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    assert await bookie.add(ledger, 0, (-1, 5, b"first")) is None
    assert await bookie.add(ledger, 1, (0, 11, b"second")) is None
    assert await bookie.add(ledger, 2, (1, 11, b"")) is None
    assert await bookie.read(ledger, 0) == (-1, 5, b"first")
    assert await bookie.read(ledger, 1) == (0, 11, b"second")
    assert await bookie.read(ledger, 2) == (1, 11, b"")


async def test_an_entry_not_added_is_no_such_entry(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    assert await bookie.add(ledger, 0, (-1, 1, b"x")) is None
    assert await bookie.add(ledger, 2, (0, 2, b"y")) is None
    assert await bookie.read(ledger, 1) is BookieFailure.NO_SUCH_ENTRY, "a gap"
    assert await bookie.read(ledger, 3) is BookieFailure.NO_SUCH_ENTRY, "past the last"


async def test_a_ledger_never_seen_is_no_such_ledger(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    assert await bookie.read(ledger, 0) is BookieFailure.NO_SUCH_LEDGER
    assert await bookie.read_last(ledger) is BookieFailure.NO_SUCH_LEDGER
    assert await bookie.read(ledger, 0) is BookieFailure.NO_SUCH_LEDGER, "a read keeps nothing"


async def test_read_last_answers_the_highest_entry_held(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    for entry_id in (0, 3, 1):  # out of order, with a gap left
        stored = (entry_id - 1, entry_id + 1, f"e{entry_id}".encode())
        assert await bookie.add(ledger, entry_id, stored) is None
    assert await bookie.read_last(ledger) == (3, (2, 4, b"e3"))
    assert await bookie.add(ledger, 2, (1, 3, b"e2")) is None, "filling the gap"
    assert await bookie.read_last(ledger) == (3, (2, 4, b"e3"))


async def test_a_fence_refuses_later_adds_but_not_recovery_adds(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    for entry_id in range(2):
        assert await bookie.add(ledger, entry_id, (entry_id - 1, entry_id + 1, b"e")) is None
    assert await bookie.read_last(ledger, fence=True) == (1, (0, 2, b"e"))
    assert await bookie.add(ledger, 2, (1, 3, b"late")) is BookieFailure.FENCED
    assert await bookie.read(ledger, 2) is BookieFailure.NO_SUCH_ENTRY, "nothing was stored"
    assert await bookie.add(ledger, 2, (1, 3, b"recovered"), recovery=True) is None
    assert await bookie.read(ledger, 2) == (1, 3, b"recovered")
    assert await bookie.read_last(ledger) == (2, (1, 3, b"recovered"))
    assert await bookie.add(ledger, 3, (2, 4, b"still late")) is BookieFailure.FENCED
    assert await bookie.read_last(ledger, fence=True) == (2, (1, 3, b"recovered")), "again"


async def test_a_fencing_entry_read_fences_too(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    assert await bookie.add(ledger, 0, (-1, 1, b"e")) is None
    assert await bookie.read(ledger, 0, fence=True) == (-1, 1, b"e")
    assert await bookie.add(ledger, 1, (0, 2, b"late")) is BookieFailure.FENCED
    assert await bookie.read(ledger, 5, fence=True) is BookieFailure.NO_SUCH_ENTRY


async def test_fencing_a_ledger_never_seen_holds_it_empty(bookie: BookieUnderTest) -> None:
    """Recovery fences every bookie of the ensemble, including ones that got no entry: the
    bookie then holds the ledger, fenced and empty (NO_SUCH_ENTRY, not NO_SUCH_LEDGER),
    and a zombie writer's first add there is refused."""
    by_read, by_read_last = fresh_ledger(), fresh_ledger()
    assert await bookie.read(by_read, 0, fence=True) is BookieFailure.NO_SUCH_ENTRY
    assert await bookie.read_last(by_read_last, fence=True) is BookieFailure.NO_SUCH_ENTRY
    for ledger in (by_read, by_read_last):
        assert await bookie.read(ledger, 0) is BookieFailure.NO_SUCH_ENTRY
        assert await bookie.read_last(ledger) is BookieFailure.NO_SUCH_ENTRY, "no entries"
        assert await bookie.add(ledger, 0, (-1, 1, b"zombie")) is BookieFailure.FENCED
        assert await bookie.add(ledger, 0, (-1, 1, b"recovered"), recovery=True) is None
        assert await bookie.read_last(ledger) == (0, (-1, 1, b"recovered"))


async def test_a_recovery_add_neither_needs_nor_sets_a_fence(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    assert await bookie.add(ledger, 0, (-1, 1, b"r"), recovery=True) is None
    assert await bookie.add(ledger, 1, (0, 2, b"n")) is None
    assert await bookie.read_last(ledger) == (1, (0, 2, b"n"))


async def test_an_entry_added_again_keeps_its_first_copy(bookie: BookieUnderTest) -> None:
    """A resend is acknowledged and reads still answer the first copy, even when the second
    carries other bytes (a real bookie's memtable keeps the first copy of a key)."""
    ledger = fresh_ledger()
    assert await bookie.add(ledger, 0, (-1, 3, b"one")) is None
    assert await bookie.add(ledger, 0, (-1, 3, b"one")) is None
    assert await bookie.add(ledger, 0, (5, 9, b"different")) is None
    assert await bookie.read(ledger, 0) == (-1, 3, b"one")
    assert await bookie.read_last(ledger) == (0, (-1, 3, b"one"))
    assert await bookie.read_last(ledger, fence=True) == (0, (-1, 3, b"one"))
    assert await bookie.add(ledger, 0, (0, 3, b"two"), recovery=True) is None
    assert await bookie.read(ledger, 0) == (-1, 3, b"one"), "a recovery re-add too"
