"""One set of cases, two bookies: the simulated one (verify/sim/bookie.py behind the simulated
wire, verify/sim/io/bookie_server.py, on the deterministic loop, where the simulations run
globelog's real code) and a real BookKeeper bookie of the local cluster. Both are reached
with globelog's own BookieClient, so the cases hold the whole simulated path to the real one:
a case that passes against one and fails against the other is a fake that lies; the real
answers are the truth.

Each case works on fresh random ledger ids. Answers are compared as the simulation sees
them: a stored entry as (lac, length, payload), or a BookieFailure. The real adapter turns
the client's errors into failures with ledger.machines.signals.failure_kind, the drivers' own table,
and lets any other error (a timeout, a lost connection) fail the case. The simulated bookie's
loop runs in a thread of its own, one call at a time, while the case awaits it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, TypeVar

import pytest

from core.errors import GlobelogError
from core.routes import publish_topology
from ledger.codecs.entry import DigestType, EntryCodec, master_key
from ledger.connections.bookie_client import BookieClient
from ledger.machines.signals import BookieFailure, failure_kind
from localcluster.controller import Cluster
from tests.support import security
from tests.support.sim_thread import SimThread
from verify.sim.bookie import SimBookie
from verify.sim.io.bookie_server import BookieServer
from verify.sim.io.loop import SimLoop
from verify.sim.io.network import Network

PASSWORD = b"globelog-contract"
KEY = master_key(PASSWORD)
GUARD_S = 15.0  # every await on the real bookie is bounded by this
POLL_SETTLES_S = 1.0  # a long poll sent is waiting at the bookie after this
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
Polled = tuple[str, int | None, Stored | None]  # (status, the bookie's LAC, the next entry)
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

    async def long_poll(
        self, ledger_id: int, previous_lac: int, timeout_ms: int
    ) -> Polled | BookieFailure: ...

    async def poll_across(
        self, ledger_id: int, previous_lac: int, timeout_ms: int, adds: list[tuple[int, Stored]]
    ) -> tuple[Polled | BookieFailure, bool]: ...

    async def poll_fenced(
        self, ledger_id: int, previous_lac: int, timeout_ms: int
    ) -> tuple[Polled | BookieFailure, bool]: ...

    async def batch(
        self, ledger_id: int, first: int, count: int
    ) -> list[Stored] | BookieFailure: ...

    async def write_lac(self, ledger_id: int, lac: int) -> BookieFailure | None: ...

    async def read_lac(self, ledger_id: int) -> tuple[int | None, int | None] | BookieFailure: ...


# -- the simulated bookie ---------------------------------------------------------------------


class Simulated:
    """The real BookieClient (the `Real` adapter) over the simulated network to a simulated
    bookie, each call run to its end on the simulation's loop in its own thread."""

    def __init__(self) -> None:
        self.loop = SimLoop(1)
        network = Network(self.loop, self.loop.rng, {})
        bookie_host = self.loop.add_host("bookie", "sim", "127.0.60.1")
        self.server = BookieServer(self.loop, network, bookie_host, SimBookie("sim"))
        self.server.start()
        self.host = self.loop.add_host("client", "sim", "127.0.60.2")
        self._thread = SimThread(self.loop)
        self._real: Real | None = None

    async def _call(self, use: Callable[[Real], Awaitable[T]]) -> T:
        async def call() -> T:
            if self._real is None:
                client = BookieClient(lambda _bookie: self.server.address)
                self._real = Real(client, self.server.address)
            return await use(self._real)

        return await self._thread.call(self.host, call)

    async def close(self) -> None:
        if self._real is not None:
            await self._thread.call(self.host, self._real.client.close)
        self._thread.close()

    async def add(
        self, ledger_id: int, entry_id: int, stored: Stored, *, recovery: bool = False
    ) -> BookieFailure | None:
        return await self._call(lambda r: r.add(ledger_id, entry_id, stored, recovery=recovery))

    async def read(
        self, ledger_id: int, entry_id: int, *, fence: bool = False
    ) -> Stored | BookieFailure:
        return await self._call(lambda r: r.read(ledger_id, entry_id, fence=fence))

    async def read_last(
        self, ledger_id: int, *, fence: bool = False
    ) -> tuple[int, Stored] | BookieFailure:
        return await self._call(lambda r: r.read_last(ledger_id, fence=fence))

    async def long_poll(
        self, ledger_id: int, previous_lac: int, timeout_ms: int
    ) -> Polled | BookieFailure:
        return await self._call(lambda r: r.long_poll(ledger_id, previous_lac, timeout_ms))

    async def poll_across(
        self, ledger_id: int, previous_lac: int, timeout_ms: int, adds: list[tuple[int, Stored]]
    ) -> tuple[Polled | BookieFailure, bool]:
        return await self._call(lambda r: r.poll_across(ledger_id, previous_lac, timeout_ms, adds))

    async def poll_fenced(
        self, ledger_id: int, previous_lac: int, timeout_ms: int
    ) -> tuple[Polled | BookieFailure, bool]:
        return await self._call(lambda r: r.poll_fenced(ledger_id, previous_lac, timeout_ms))

    async def batch(self, ledger_id: int, first: int, count: int) -> list[Stored] | BookieFailure:
        return await self._call(lambda r: r.batch(ledger_id, first, count))

    async def write_lac(self, ledger_id: int, lac: int) -> BookieFailure | None:
        return await self._call(lambda r: r.write_lac(ledger_id, lac))

    async def read_lac(self, ledger_id: int) -> tuple[int | None, int | None] | BookieFailure:
        return await self._call(lambda r: r.read_lac(ledger_id))


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

    async def long_poll(
        self, ledger_id: int, previous_lac: int, timeout_ms: int
    ) -> Polled | BookieFailure:
        answer = await answered(
            self.client.read_lac_long_poll(self.bookie_id, ledger_id, previous_lac, timeout_ms)
        )
        if isinstance(answer, BookieFailure):
            return answer
        stored = None
        if answer.body:
            entry = self.codec(ledger_id).decode_entry(answer.body, previous_lac + 1)
            stored = (entry.lac, entry.length, bytes(entry.payload))
        return answer.status.name, answer.max_lac, stored

    async def poll_across(
        self, ledger_id: int, previous_lac: int, timeout_ms: int, adds: list[tuple[int, Stored]]
    ) -> tuple[Polled | BookieFailure, bool]:
        """A long poll sent, then `adds` made one after another while it waits."""

        async def add_all() -> None:
            for entry_id, stored in adds:
                assert await self.add(ledger_id, entry_id, stored) is None

        return await self._poll_while(ledger_id, previous_lac, timeout_ms, add_all)

    async def poll_fenced(
        self, ledger_id: int, previous_lac: int, timeout_ms: int
    ) -> tuple[Polled | BookieFailure, bool]:
        """A long poll sent, then the ledger fenced (a fencing read of its last entry)."""

        async def fence() -> None:
            assert not isinstance(await self.read_last(ledger_id, fence=True), BookieFailure)

        return await self._poll_while(ledger_id, previous_lac, timeout_ms, fence)

    async def _poll_while(
        self,
        ledger_id: int,
        previous_lac: int,
        timeout_ms: int,
        meanwhile: Callable[[], Awaitable[None]],
    ) -> tuple[Polled | BookieFailure, bool]:
        """The poll's answer, and whether it came well before its timeout (woken by what
        was done `meanwhile`, not timed out: within half the time it had left after)."""
        clock = asyncio.get_running_loop().time
        sent_s = clock()
        poll = asyncio.ensure_future(self.long_poll(ledger_id, previous_lac, timeout_ms))
        try:
            await asyncio.sleep(POLL_SETTLES_S)  # waiting at the bookie by now
            await meanwhile()
            done_s = clock()
            answer = await poll
        finally:
            poll.cancel()
        left_s = sent_s + timeout_ms / 1000 - done_s
        return answer, clock() - done_s < left_s / 2

    async def batch(self, ledger_id: int, first: int, count: int) -> list[Stored] | BookieFailure:
        answer = await answered(self.client.batch_read(self.bookie_id, ledger_id, first, count))
        if isinstance(answer, BookieFailure):
            return answer
        codec = self.codec(ledger_id)
        entries = [codec.decode_entry(packet, first + i) for i, packet in enumerate(answer)]
        return [(e.lac, e.length, bytes(e.payload)) for e in entries]

    async def write_lac(self, ledger_id: int, lac: int) -> BookieFailure | None:
        packet = self.codec(ledger_id).encode_lac(lac)
        answer = await answered(self.client.write_lac(self.bookie_id, ledger_id, lac, KEY, packet))
        return answer if isinstance(answer, BookieFailure) else None

    async def read_lac(self, ledger_id: int) -> tuple[int | None, int | None] | BookieFailure:
        answer = await answered(self.client.read_lac(self.bookie_id, ledger_id))
        if isinstance(answer, BookieFailure):
            return answer
        codec = self.codec(ledger_id)
        explicit = codec.decode_lac(answer.lac_body) if answer.lac_body else None
        last = codec.decode_last_entry(answer.last_entry_body) if answer.last_entry_body else None
        return explicit, None if last is None else last.entry_id


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
        simulated = Simulated()
        yield simulated
        await simulated.close()
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


async def test_a_long_poll_answers_past_the_lac_with_the_next_entry_or_at_its_timeout(
    bookie: BookieUnderTest,
) -> None:
    ledger = fresh_ledger()
    assert await bookie.add(ledger, 0, (-1, 1, b"a")) is None
    assert await bookie.add(ledger, 1, (0, 2, b"b")) is None  # the bookie's LAC is now 0
    assert await bookie.long_poll(ledger, -1, 1000) == ("EOK", 0, (-1, 1, b"a"))
    assert await bookie.long_poll(ledger, 0, 200) == ("EOK", 0, None), "timed out at the bookie"
    assert await bookie.add(ledger, 3, (2, 4, b"d")) is None  # LAC 2; entry 1 held, 2 not
    assert await bookie.long_poll(ledger, 0, 1000) == ("EOK", 2, (0, 2, b"b"))
    # past the LAC but not held here (striped away, or missed): the LAC alone
    assert await bookie.long_poll(ledger, 1, 1000) == ("EOK", 2, None)


async def test_a_long_poll_is_woken_once_a_move_that_does_not_pass_it_leaves_it_to_time_out(
    bookie: BookieUnderTest,
) -> None:
    """A bookie wakes a ledger's waiting polls when its LAC moves, once: a poll asked from
    past the bookie's LAC is spent by a move that does not pass it, and then answers only at
    its timeout, however far the LAC moves meanwhile (BookKeeper's one-shot notification;
    a tailing reader asks each bookie from the LAC that bookie last gave)."""
    ledger = fresh_ledger()
    assert await bookie.add(ledger, 0, (-1, 1, b"a")) is None
    assert await bookie.add(ledger, 1, (0, 2, b"b")) is None  # the bookie's LAC is now 0
    moves = [(2, (1, 3, b"c")), (3, (2, 4, b"d"))]  # to LAC 1, then 2
    assert await bookie.poll_across(ledger, 0, 4000, moves) == (("EOK", 1, (0, 2, b"b")), True)
    ledger = fresh_ledger()
    assert await bookie.add(ledger, 0, (-1, 1, b"a")) is None
    assert await bookie.add(ledger, 1, (0, 2, b"b")) is None
    answer, woken = await bookie.poll_across(ledger, 1, 4000, moves)  # asked from past LAC 0
    assert answer == ("EOK", 2, (1, 3, b"c")), "entry 2 at the timeout, the LAC past it"
    assert not woken, "the move to LAC 1 spent the poll; the move to 2 did not wake it"


async def test_fencing_a_ledger_wakes_the_long_polls_waiting_on_it(
    bookie: BookieUnderTest,
) -> None:
    """A recovery's fencing read answers every poll waiting on the ledger at once, with the
    LAC as it stands (a new owner took the ledger: a tailing reader hears of it now, not at
    its poll's timeout)."""
    ledger = fresh_ledger()
    assert await bookie.add(ledger, 0, (-1, 1, b"a")) is None
    assert await bookie.add(ledger, 1, (0, 2, b"b")) is None  # LAC 0
    answer, woken = await bookie.poll_fenced(ledger, 0, 4000)
    assert (answer, woken) == (("EOK", 0, None), True)


async def test_a_long_poll_of_a_ledger_never_seen_is_no_such_ledger(
    bookie: BookieUnderTest,
) -> None:
    assert await bookie.long_poll(fresh_ledger(), -1, 200) is BookieFailure.NO_SUCH_LEDGER


async def test_a_batch_read_stops_at_the_first_entry_missing(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    for entry_id in (0, 1, 2, 4):
        assert await bookie.add(ledger, entry_id, (entry_id - 1, entry_id + 1, b"e")) is None
    assert await bookie.batch(ledger, 0, 10) == [(-1, 1, b"e"), (0, 2, b"e"), (1, 3, b"e")]
    assert await bookie.batch(ledger, 1, 1) == [(0, 2, b"e")]
    assert await bookie.batch(ledger, 3, 5) is BookieFailure.NO_SUCH_ENTRY
    assert await bookie.batch(fresh_ledger(), 0, 5) is BookieFailure.NO_SUCH_LEDGER


async def test_an_explicit_lac_reads_back_beside_the_last_entry(bookie: BookieUnderTest) -> None:
    ledger = fresh_ledger()
    for entry_id in range(3):
        assert await bookie.add(ledger, entry_id, (entry_id - 1, entry_id + 1, b"e")) is None
    assert await bookie.read_lac(ledger) == (None, 2), "no explicit LAC written yet"
    assert await bookie.write_lac(ledger, 2) is None
    assert await bookie.read_lac(ledger) == (2, 2)
    assert await bookie.long_poll(ledger, 1, 1000) == ("EOK", 2, (1, 3, b"e")), "it moved the LAC"
