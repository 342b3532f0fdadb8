"""The byte rate of one rebuilder: every ledger it copies draws from one budget, so the
foreground (writers and readers of the same bookies and WAN links) keeps its share.

Two ways to set it:
- a fixed rate (`Pacer`): `rate_bytes_s`, whatever the bookies are doing;
- a rate that yields (`YieldingPacer`, `yield_delay_s` > 0): the rebuild is background work,
  so it slows down as soon as its own adds wait longer than they need to. Each batch sent to a
  replacement reports how long its first add took; the least that bookie took in the last
  ten minutes is its base (the round trip and a journal write with nothing queued), and the
  least of its last RECENT_SAMPLES adds above the base is queueing (the least, so that a WAN's
  jitter on one add is not taken for a queue), which every writer of that bookie waits
  through too. Queueing above `yield_delay_s` cuts the rate by YIELD_CUT (at most once per
  CUT_EVERY_S); below it the rate grows by a twentieth of the ceiling per second (from the
  floor at the start: a worker that starts among busy bookies should not arrive at full
  speed). The rate stays between
  `rate_min_bytes_s` (lost copies are re-made whatever the load: durability is at stake) and
  `rate_bytes_s`. The same delay-based yielding as LEDBAT's background transfers, on bytes
  per second instead of a window.

Either is the budget of the cluster's rebuilders together when `shared_pace` is on (the
default): each rebuilder takes an equal share of it (`share`) among those copying at the time,
as their published statuses show (rebuild.service). Rebuilders that each yield on their own
add up: three at the floor copy three floors' worth, and each one's growth adds to the others'
queueing before any of them sees it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from ledger import COPY_BATCH_BYTES

YIELD_CUT = 0.7  # the rate is multiplied by this when queueing is above the target
CUT_EVERY_S = 0.25  # at most one cut per this long: one congestion episode, one cut
GROWTH_PER_S = 0.05  # of the ceiling, added per second while queueing is below the target
# a bookie's base latency is the least of the last BASE_BUCKETS buckets (ten minutes, as
# LEDBAT's: a queue that lasts longer than the history would become the base)
BASE_BUCKET_S = 60.0
BASE_BUCKETS = 10
BATCH_BYTES_MAX = COPY_BATCH_BYTES  # a batched read of a fixed pace: the ledger copy's own
BATCH_BYTES_MIN = 64 * 1024  # ... and of a yielding one at its slowest (one entry at least)
RECENT_SAMPLES = 4  # a bookie's queueing is read from the least of its last few adds (jitter)
BOOKIES_KEPT_MAX = 4096  # base latencies kept (I10); past it, the least recently seen go


class Pacer:
    """A token bucket of bytes. `await pacer(n)` takes n bytes and sleeps for as long as the
    bucket is in debt, so the long-run rate is `rate` with bursts up to `burst`.

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
        self.rate = float(rate_bytes_s)
        self.burst = burst_bytes if burst_bytes is not None else rate_bytes_s
        self._clock = clock or asyncio.get_running_loop().time
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._at = self._clock()
        self._shares = 1

    @property
    def shares(self) -> int:
        return self._shares

    def share(self, shares: int) -> None:
        """`shares` rebuilders copy at once, this one among them: it takes 1/shares of the
        rate it was given, so together they copy at that rate (its current rate moves by the
        same factor)."""
        shares = max(1, shares)
        if shares != self._shares:
            self._rescale(self._shares / shares)
            self._shares = shares

    def _rescale(self, factor: float) -> None:
        self.rate *= factor
        self.burst = max(1, int(self.burst * factor))
        self._tokens = min(self._tokens, float(self.burst))

    async def __call__(self, size: int) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= size
        if self._tokens < 0:
            await self._sleep(-self._tokens / self.rate)

    def observe(self, bookie: str, seconds: float) -> None:
        """A batch's first add to `bookie` took `seconds`: a fixed rate does not care."""

    @property
    def batch_bytes(self) -> int:
        return BATCH_BYTES_MAX


class YieldingPacer(Pacer):
    """A Pacer whose rate follows the queueing its adds see (module docstring)."""

    def __init__(
        self,
        ceiling_bytes_s: int,
        floor_bytes_s: int,
        yield_delay_s: float,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        assert 0 < floor_bytes_s <= ceiling_bytes_s and yield_delay_s > 0
        # a tenth of a second's worth at most in one go: a burst is queueing for the foreground
        super().__init__(floor_bytes_s, max(1, floor_bytes_s // 10), clock, sleep)
        self.floor, self.ceiling = float(floor_bytes_s), float(ceiling_bytes_s)
        self.yield_delay_s = yield_delay_s
        self.cuts = 0
        self._bases: dict[str, list[tuple[int, float]]] = {}  # bookie -> [(bucket, least s)]
        self._recent: dict[str, deque[float]] = {}  # bookie -> its last RECENT_SAMPLES
        self._cut_at = float("-inf")
        self._grown_at = self._clock()

    def _rescale(self, factor: float) -> None:
        self.floor *= factor
        self.ceiling *= factor
        self._set_rate(self.rate * factor)

    @property
    def batch_bytes(self) -> int:
        """A tenth of a second's worth: the reads ahead of many ledgers starting at once at
        a slow pace would otherwise be a burst of BATCH_BYTES_MAX each."""
        return max(BATCH_BYTES_MIN, min(BATCH_BYTES_MAX, self.burst))

    def base(self, bookie: str) -> float | None:
        buckets = self._bases.get(bookie)
        return min(least for _, least in buckets) if buckets else None

    def observe(self, bookie: str, seconds: float) -> None:
        now = self._clock()
        self._remember(bookie, seconds, now)
        base = self.base(bookie)
        assert base is not None
        if min(self._recent[bookie]) - base > self.yield_delay_s:
            if now - self._cut_at >= CUT_EVERY_S:
                self._cut_at = now
                self.cuts += 1
                self._set_rate(self.rate * YIELD_CUT)
            self._grown_at = now
            return
        elapsed = min(1.0, max(0.0, now - self._grown_at))
        self._grown_at = now
        self._set_rate(self.rate + self.ceiling * GROWTH_PER_S * elapsed)

    def _set_rate(self, rate: float) -> None:
        self.rate = min(self.ceiling, max(self.floor, rate))
        self.burst = max(1, int(self.rate / 10))
        self._tokens = min(self._tokens, float(self.burst))

    def _remember(self, bookie: str, seconds: float, now: float) -> None:
        bucket = int(now // BASE_BUCKET_S)
        buckets = self._bases.pop(bookie, [])  # popped and put back: the dict's order is recency
        if buckets and buckets[-1][0] == bucket:
            buckets[-1] = (bucket, min(buckets[-1][1], seconds))
        else:
            buckets.append((bucket, seconds))
        self._bases[bookie] = [(b, s) for b, s in buckets if b > bucket - BASE_BUCKETS]
        recent = self._recent.pop(bookie, None) or deque(maxlen=RECENT_SAMPLES)
        recent.append(seconds)
        self._recent[bookie] = recent
        while len(self._bases) > BOOKIES_KEPT_MAX:
            del self._bases[next(iter(self._bases))]
        while len(self._recent) > BOOKIES_KEPT_MAX:
            del self._recent[next(iter(self._recent))]


def pacer_of(
    rate_bytes_s: int,
    rate_min_bytes_s: int,
    yield_delay_s: float,
    clock: Callable[[], float] | None = None,
) -> Pacer:
    """The pacer the settings ask for: yielding when `yield_delay_s` > 0, else fixed."""
    if yield_delay_s > 0:
        floor = min(rate_min_bytes_s, rate_bytes_s)
        return YieldingPacer(rate_bytes_s, floor, yield_delay_s, clock=clock)
    return Pacer(rate_bytes_s, clock=clock)
