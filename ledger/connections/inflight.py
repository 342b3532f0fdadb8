"""The requests one bookie connection has sent and not yet settled: txn ids, deadlines, a bound.

Pure bookkeeping with time as an input; the connection driver arms its one timer at
`next_deadline_s()` and calls `expire(now)` when it fires. Each request carries a `ticket`
(the driver's future) so the driver needs no second table.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Generic, TypeVar

from ledger.codes import OperationType

TXN_ID_MAX = (1 << 64) - 1  # BKPacketHeader.txnId is a uint64
# Settled requests leave stale heap entries behind until they reach the top; rebuild the heap
# when it holds this many times the live requests, so one slow request cannot grow it unbounded.
HEAP_REBUILD_FACTOR = 4
HEAP_REBUILD_MIN = 64  # below this many entries a stale heap costs nothing worth a rebuild

T = TypeVar("T")


@dataclass(slots=True)
class Outstanding(Generic[T]):
    """One request in flight."""

    txn_id: int
    operation: OperationType
    sent_s: float
    deadline_s: float
    ticket: T


class InflightWindow(Generic[T]):
    """At most `inflight_max` requests, each with a unique txn id and a deadline."""

    def __init__(self, inflight_max: int, first_txn_id: int = 1) -> None:
        assert inflight_max > 0, inflight_max
        assert 0 <= first_txn_id <= TXN_ID_MAX, first_txn_id
        self.inflight_max = inflight_max
        self._next_txn_id = first_txn_id
        self._requests: dict[int, Outstanding[T]] = {}
        self._deadlines: list[tuple[float, int]] = []  # heap of (deadline, txn id), maybe stale
        self.unknown_responses = 0  # responses for no request in flight (late after a timeout)

    def __len__(self) -> int:
        return len(self._requests)

    @property
    def full(self) -> bool:
        return len(self._requests) >= self.inflight_max

    def reserve_txn_id(self) -> int:
        """The next unused txn id (to build the request with, before `open`)."""
        txn_id = self._next_txn_id
        assert txn_id <= TXN_ID_MAX, "txn ids exhausted"
        self._next_txn_id += 1
        return txn_id

    def open(
        self, txn_id: int, operation: OperationType, now_s: float, deadline_s: float, ticket: T
    ) -> None:
        """Records a request about to be sent. The caller holds one of `inflight_max` slots."""
        assert not self.full, "the in-flight bound is enforced before open()"
        assert txn_id not in self._requests, txn_id
        self._requests[txn_id] = Outstanding(txn_id, operation, now_s, deadline_s, ticket)
        heapq.heappush(self._deadlines, (deadline_s, txn_id))
        if len(self._deadlines) > HEAP_REBUILD_FACTOR * max(len(self._requests), HEAP_REBUILD_MIN):
            self._rebuild()

    def settle(self, txn_id: int) -> Outstanding[T] | None:
        """The request a response answers, removed; None (and counted) if none is in flight."""
        request = self._requests.pop(txn_id, None)
        if request is None:
            self.unknown_responses += 1
        return request

    def expire(self, now_s: float) -> list[Outstanding[T]]:
        """Removes and returns every request whose deadline is at or before `now_s`."""
        expired: list[Outstanding[T]] = []
        heap = self._deadlines
        while heap and heap[0][0] <= now_s:
            deadline_s, txn_id = heapq.heappop(heap)
            request = self._requests.get(txn_id)
            if request is not None and request.deadline_s == deadline_s:
                del self._requests[txn_id]
                expired.append(request)
        return expired

    def next_deadline_s(self) -> float | None:
        """The earliest deadline of a request still in flight."""
        heap = self._deadlines
        while heap and heap[0][1] not in self._requests:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def drain(self) -> list[Outstanding[T]]:
        """Removes and returns every request in flight (the connection failed)."""
        drained = list(self._requests.values())
        self._requests.clear()
        self._deadlines.clear()
        return drained

    def _rebuild(self) -> None:
        self._deadlines = [(r.deadline_s, r.txn_id) for r in self._requests.values()]
        heapq.heapify(self._deadlines)
