"""The pure parts of the bookie connection: the in-flight window and the FIFO slots."""

from __future__ import annotations

import asyncio

import pytest

from ledger.codes import OperationType
from ledger.connections.inflight import HEAP_REBUILD_FACTOR, HEAP_REBUILD_MIN, InflightWindow
from ledger.connections.slots import Slots

pytestmark = pytest.mark.unit

ADD = OperationType.ADD_ENTRY
READ = OperationType.READ_ENTRY


def opened(window: InflightWindow[str], now_s: float, timeout_s: float, ticket: str) -> int:
    txn_id = window.reserve_txn_id()
    window.open(txn_id, ADD, now_s, now_s + timeout_s, ticket)
    return txn_id


def test_txn_ids_are_unique_and_settle_finds_each_request() -> None:
    window: InflightWindow[str] = InflightWindow(inflight_max=8)
    ids = [opened(window, 0.0, 5.0, f"r{i}") for i in range(5)]
    assert len(set(ids)) == 5 and ids == sorted(ids)
    settled = window.settle(ids[3])
    assert settled is not None and settled.ticket == "r3" and settled.txn_id == ids[3]
    assert len(window) == 4 and window.unknown_responses == 0


def test_a_response_for_no_request_in_flight_is_counted_and_changes_nothing() -> None:
    window: InflightWindow[str] = InflightWindow(inflight_max=8)
    txn_id = opened(window, 0.0, 5.0, "r")
    assert window.settle(txn_id + 100) is None
    assert window.settle(txn_id) is not None
    assert window.settle(txn_id) is None  # a duplicate answer
    assert window.unknown_responses == 2 and len(window) == 0


def test_expire_returns_only_requests_past_their_deadline_in_deadline_order() -> None:
    window: InflightWindow[str] = InflightWindow(inflight_max=8)
    late = opened(window, 0.0, 10.0, "long poll")
    first = opened(window, 1.0, 2.0, "a")  # due at 3
    second = opened(window, 1.5, 2.0, "b")  # due at 3.5
    assert window.next_deadline_s() == 3.0
    assert window.expire(2.99) == []
    assert [r.txn_id for r in window.expire(3.5)] == [first, second]
    assert window.next_deadline_s() == 10.0
    assert [r.txn_id for r in window.expire(10.0)] == [late]
    assert window.next_deadline_s() is None and len(window) == 0


def test_settled_requests_never_expire() -> None:
    window: InflightWindow[str] = InflightWindow(inflight_max=8)
    txn_id = opened(window, 0.0, 1.0, "r")
    window.settle(txn_id)
    assert window.expire(100.0) == []
    assert window.next_deadline_s() is None


def test_the_bound_is_asserted_and_drain_empties_the_window() -> None:
    window: InflightWindow[str] = InflightWindow(inflight_max=2)
    opened(window, 0.0, 1.0, "a")
    opened(window, 0.0, 1.0, "b")
    assert window.full
    with pytest.raises(AssertionError, match="in-flight bound"):
        opened(window, 0.0, 1.0, "c")
    assert sorted(r.ticket for r in window.drain()) == ["a", "b"]
    assert len(window) == 0 and window.next_deadline_s() is None and not window.full


def test_one_slow_request_does_not_let_the_deadline_heap_grow_unbounded() -> None:
    window: InflightWindow[str] = InflightWindow(inflight_max=4)
    # The slow request's deadline stays at the top of the heap; settled ones pile up behind it.
    slow = opened(window, 0.0, 100.0, "slow")
    for i in range(10_000):
        txn_id = opened(window, 1.0 + i, 200.0, "fast")
        window.settle(txn_id)
    assert len(window._deadlines) <= HEAP_REBUILD_FACTOR * HEAP_REBUILD_MIN + 1
    assert window.next_deadline_s() == 100.0
    assert [r.txn_id for r in window.expire(100.0)] == [slow]


async def test_slots_are_handed_out_first_come_first_served() -> None:
    slots = Slots(1)
    assert slots.try_take() and not slots.try_take()
    order: list[str] = []

    async def take(name: str) -> None:
        await slots.take()
        order.append(name)

    waiters = [asyncio.create_task(take(n)) for n in "abc"]
    await asyncio.sleep(0)
    for _ in range(3):
        slots.give()
        await asyncio.sleep(0)
    await asyncio.gather(*waiters)
    assert order == ["a", "b", "c"] and slots.free == 0
    slots.give()
    assert slots.free == 1


async def test_a_cancelled_waiter_takes_no_slot() -> None:
    slots = Slots(1)
    assert slots.try_take()
    gone = asyncio.create_task(slots.take())
    stays = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    slots.give()  # skips the cancelled waiter
    await stays
    assert gone.cancelled() and slots.free == 0


async def test_a_slot_handed_to_a_caller_cancelled_at_that_moment_is_passed_on() -> None:
    slots = Slots(1)
    assert slots.try_take()
    first = asyncio.create_task(slots.take())
    second = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    slots.give()  # hands the slot to `first`...
    first.cancel()  # ...which is cancelled before it runs
    await asyncio.gather(first, second, return_exceptions=True)
    assert first.cancelled() and second.done() and not second.cancelled()
    assert slots.free == 0
    with pytest.raises(AssertionError, match="more slots given back"):
        slots.give()
        slots.give()
