"""The add timeouts of one `AddState`: every send in flight, with its deadline. Pure.

Covers the sends of pending entries and of stragglers: entries acknowledged at the ack
quorum while a bookie of their write set had not answered. A straggler's timeout or error
still replaces that bookie for later entries, where BookKeeper ignores failures after the
ack quorum (apache/bookkeeper#1390).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

PENDING_ADDS_MAX = 1000  # adds in flight per handle; `room` is 0 beyond it (backpressure)
# Completed entries whose remaining copy is still in flight. A bookie that lags this many
# entries behind its peers is treated as failed, like one that timed out.
STRAGGLERS_MAX = PENDING_ADDS_MAX
# Deadlines kept, answered ones included until they surface, as a multiple of the most
# sends that can be in flight; compaction keeps the heap under it.
DEADLINES_SLACK = 4

Sends = dict[int, float]  # ensemble position -> sent at


class SendDeadlines:
    """Send times by entry and position, with a heap of deadlines earliest first.

    Answers leave stale heap items behind; they are dropped when they reach the top (or by
    compaction), so timeouts and the next wake-up cost O(log n), not a scan of everything in
    flight. `pending_sends(entry)` gives a pending entry's live send times (owned by AddState).
    """

    def __init__(
        self, timeout_s: float, in_flight_max: int, pending_sends: Callable[[int], Sends | None]
    ) -> None:
        self._timeout_s = timeout_s
        self._pending_sends = pending_sends
        self.stragglers: dict[int, Sends] = {}
        self._heap: list[tuple[float, int, int]] = []
        self._heap_max = DEADLINES_SLACK * in_flight_max

    def _sends_of(self, entry_id: int) -> Sends | None:
        sends = self._pending_sends(entry_id)
        return sends if sends is not None else self.stragglers.get(entry_id)

    def _in_flight(self, sent_s: float, entry_id: int, index: int) -> bool:
        sends = self._sends_of(entry_id)
        return sends is not None and sends.get(index) == sent_s

    def sent(self, sent_s: float, entry_id: int, index: int) -> None:
        """Records a send the caller already put in the entry's send times."""
        heapq.heappush(self._heap, (sent_s, entry_id, index))
        if len(self._heap) > self._heap_max:
            self._heap = [d for d in self._heap if self._in_flight(*d)]
            heapq.heapify(self._heap)

    def next_wakeup_s(self) -> float | None:
        while self._heap and not self._in_flight(*self._heap[0]):
            heapq.heappop(self._heap)
        return self._heap[0][0] + self._timeout_s if self._heap else None

    def expire(self, now_s: float) -> set[int]:
        """Removes every send older than the timeout; the positions that timed out."""
        expired: set[int] = set()
        cutoff_s = now_s - self._timeout_s
        while self._heap and self._heap[0][0] <= cutoff_s:
            sent_s, entry_id, index = heapq.heappop(self._heap)
            sends = self._sends_of(entry_id)
            if sends is not None and sends.get(index) == sent_s:
                del sends[index]
                expired.add(index)
                if not sends and entry_id in self.stragglers:
                    del self.stragglers[entry_id]
        return expired

    def retire(self, entry_id: int, sends: Sends) -> None:
        """An entry completed; its sends still in flight become a straggler's."""
        if sends:
            self.stragglers[entry_id] = dict(sends)

    def straggler_answered(self, entry_id: int, position_of: Callable[[int], bool]) -> int | None:
        """Forgets a straggler's send to the position `position_of` picks; that position."""
        sends = self.stragglers.get(entry_id)
        if sends is None:
            return None
        index = next((i for i in sends if position_of(i)), None)
        if index is not None:
            del sends[index]
            if not sends:
                del self.stragglers[entry_id]
        return index

    def forget_positions(self, changed: set[int]) -> None:
        """Replaced bookies' answers for stragglers no longer matter."""
        for sends in self.stragglers.values():
            for index in changed & set(sends):
                del sends[index]
        self.stragglers = {e: sends for e, sends in self.stragglers.items() if sends}

    def overflow(self) -> set[int]:
        """When there are too many stragglers, the oldest ones' lagging positions (as many
        as it takes to come back to the limit: a batch of completions can add several)."""
        lagging: set[int] = set()
        while len(self.stragglers) > STRAGGLERS_MAX:
            lagging |= set(self.stragglers.pop(min(self.stragglers)))
        return lagging

    def clear(self) -> None:
        self.stragglers.clear()
        self._heap.clear()

    def validate(self, lac: int) -> None:
        assert all(e <= lac and sends for e, sends in self.stragglers.items()), self.stragglers
        assert len(self.stragglers) <= STRAGGLERS_MAX, len(self.stragglers)
        assert len(self._heap) <= self._heap_max, len(self._heap)
