"""The byte rate of one rebuilder: every ledger it copies draws from one budget, so the
foreground (writers and readers of the same bookies and WAN links) keeps its share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class Pacer:
    """A token bucket of bytes. `await pacer(n)` takes n bytes and sleeps for as long as the
    bucket is in debt, so the long-run rate is `rate_bytes_s` with bursts up to `burst`.

    A batch larger than the burst is let through at once and paid for by the next ones.
    """

    def __init__(
        self,
        rate_bytes_s: int,
        burst_bytes: int | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        assert rate_bytes_s > 0, rate_bytes_s
        self.rate = rate_bytes_s
        self.burst = burst_bytes if burst_bytes is not None else rate_bytes_s
        self._clock = clock or asyncio.get_running_loop().time
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._at = self._clock()

    async def __call__(self, size: int) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= size
        if self._tokens < 0:
            await self._sleep(-self._tokens / self.rate)
