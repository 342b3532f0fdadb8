"""A fixed number of slots handed out first come, first served, O(1) per take and give.

asyncio.Semaphore in Python 3.11 scans its waiters on every acquire and release, which turns
quadratic with thousands of callers waiting on a full in-flight window; this does not.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Slots:
    """`count` slots; `take()` waits in FIFO order when none is free."""

    def __init__(self, count: int) -> None:
        assert count > 0, count
        self.count = count
        self._free = count
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def free(self) -> int:
        return self._free

    def try_take(self) -> bool:
        """Takes a slot if one is free and nobody is queued before us."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def take(self) -> None:
        """Waits for a slot; cancellation while waiting takes none."""
        if self.try_take():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a slot just as the caller was cancelled: pass it on
            raise

    def give(self) -> None:
        """Returns a slot: to the first caller still waiting, else to the free count."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # cancelled waiters are skipped here, not searched for
                waiter.set_result(None)
                return
        assert self._free < self.count, "more slots given back than taken"
        self._free += 1
