"""What this client observed about each bookie: failures, latencies, slowness, pending requests.

Pure state: the driver reports observations with the time, and every query takes the time
too. History older than `history_ttl_s` (BookKeeper's bookieFailureHistoryExpirationMSec,
60 s) no longer counts, so a demoted bookie is promoted again once it has behaved for a TTL.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

HISTORY_TTL_S = 60.0
LATENCY_SAMPLES_MAX = 64  # per bookie: enough for a p99 of recent reads, small enough to sort
TRACKED_BOOKIES_MAX = 1024  # clusters have tens of bookies; a bound against id churn


@dataclass(frozen=True, slots=True)
class HealthConfig:
    history_ttl_s: float = HISTORY_TTL_S
    latency_samples_max: int = LATENCY_SAMPLES_MAX
    tracked_bookies_max: int = TRACKED_BOOKIES_MAX

    def __post_init__(self) -> None:
        assert self.history_ttl_s > 0, self.history_ttl_s
        assert self.latency_samples_max > 0, self.latency_samples_max
        assert self.tracked_bookies_max > 0, self.tracked_bookies_max


@dataclass(slots=True)
class _Record:
    last_seen_s: float
    samples: deque[tuple[float, float]]  # (observed at, latency), oldest first
    failure_s: float | None = None
    answered_s: float | None = None  # its last answer that taught no latency (a probe's)
    slow_s: float | None = None
    pending: int = 0
    # The sorted latencies within the TTL, kept until a sample arrives or the oldest of them
    # passes the TTL: read ordering asks for quantiles once per candidate bookie per read.
    sorted_cache: tuple[float, ...] | None = None
    cache_from_s: float = 0.0
    cache_valid_until_s: float = 0.0


class BookieHealth:
    """Per-bookie observations of one client, bounded in bookies and in samples per bookie."""

    def __init__(self, config: HealthConfig | None = None) -> None:
        self.config = config if config is not None else HealthConfig()
        self._records: dict[str, _Record] = {}

    def record_failure(self, bookie_id: str, now_s: float) -> None:
        """A request to the bookie failed (error, timeout, missing entry it should have)."""
        self._record(bookie_id, now_s).failure_s = now_s

    def record_answer(self, bookie_id: str, now_s: float) -> None:
        """The bookie answered a request whose time says nothing of a read's (a probe, a
        batched read): no latency sample, but no longer silent since a failure."""
        self._record(bookie_id, now_s).answered_s = now_s

    def record_slow(self, bookie_id: str, now_s: float) -> None:
        """A later replica answered a read first after a speculative retry (BookKeeper's signal)."""
        self._record(bookie_id, now_s).slow_s = now_s

    def record_latency(self, bookie_id: str, latency_s: float, now_s: float) -> None:
        assert latency_s >= 0 and math.isfinite(latency_s), latency_s
        record = self._record(bookie_id, now_s)
        record.samples.append((now_s, latency_s))
        record.sorted_cache = None

    def set_pending_requests(self, bookie_id: str, count: int) -> None:
        """This client's outstanding requests to the bookie, as its connection counts them."""
        assert count >= 0, count
        record = self._records.get(bookie_id)
        if record is not None:
            record.pending = count
        elif count > 0:
            self._record(bookie_id, None).pending = count

    def pending_requests(self, bookie_id: str) -> int:
        record = self._records.get(bookie_id)
        return record.pending if record is not None else 0

    def last_failure_s(self, bookie_id: str, now_s: float) -> float | None:
        """When the bookie last failed, if that is within the TTL."""
        record = self._records.get(bookie_id)
        return self._fresh(record.failure_s, now_s) if record is not None else None

    def silent_since_failure_s(self, bookie_id: str, now_s: float) -> float | None:
        """When the bookie last failed, if within the TTL and nothing it answered has been
        observed since (a failure it answered, such as a digest error, is no silence)."""
        record = self._records.get(bookie_id)
        if record is None:
            return None
        failed_s = self._fresh(record.failure_s, now_s)
        if failed_s is None or (record.samples and record.samples[-1][0] >= failed_s):
            return None
        if record.answered_s is not None and record.answered_s >= failed_s:
            return None
        return failed_s

    def answered_lately(self, bookie_id: str, now_s: float, within_s: float) -> bool:
        """Whether the bookie answered something within the last `within_s`, after its last
        failure (if any): evidence that it answers now, where `silent_since_failure_s` is
        None for a bookie never asked anything, or one behind a cut between two dials."""
        record = self._records.get(bookie_id)
        if record is None:
            return False
        answers = [record.answered_s, record.samples[-1][0] if record.samples else None]
        answered_s = max((a for a in answers if a is not None), default=None)
        if answered_s is None or answered_s < now_s - within_s:
            return False
        failed_s = self._fresh(record.failure_s, now_s)
        return failed_s is None or answered_s >= failed_s

    def marked_slow(self, bookie_id: str, now_s: float) -> bool:
        record = self._records.get(bookie_id)
        return record is not None and self._fresh(record.slow_s, now_s) is not None

    def latencies_s(self, bookie_id: str, now_s: float) -> tuple[float, ...]:
        """Latency samples observed within the TTL, oldest first."""
        record = self._records.get(bookie_id)
        if record is None:
            return ()
        horizon_s = now_s - self.config.history_ttl_s
        return tuple(latency for at_s, latency in record.samples if at_s > horizon_s)

    def latency_quantile_s(
        self, bookie_id: str, quantile: float, now_s: float, samples_min: int = 1
    ) -> float | None:
        """Nearest-rank quantile of recent latencies; None with fewer than `samples_min`."""
        assert 0 < quantile <= 1, quantile
        samples = self._sorted_latencies(bookie_id, now_s)
        if len(samples) < max(1, samples_min):
            return None
        return samples[math.ceil(quantile * len(samples)) - 1]

    def _sorted_latencies(self, bookie_id: str, now_s: float) -> tuple[float, ...]:
        record = self._records.get(bookie_id)
        if record is None:
            return ()
        cached = record.sorted_cache
        if cached is not None and record.cache_from_s <= now_s < record.cache_valid_until_s:
            return cached
        horizon_s = now_s - self.config.history_ttl_s
        fresh = [(at_s, latency) for at_s, latency in record.samples if at_s > horizon_s]
        latencies = tuple(sorted(latency for _, latency in fresh))
        # Valid until the oldest sample used leaves the TTL (or a new one arrives).
        record.sorted_cache = latencies
        record.cache_from_s = now_s
        oldest_s = min((at_s for at_s, _ in fresh), default=now_s)
        record.cache_valid_until_s = oldest_s + self.config.history_ttl_s
        return latencies

    def expire(self, now_s: float) -> None:
        """Forget history older than the TTL; keep bookies with requests still pending."""
        horizon_s = now_s - self.config.history_ttl_s
        for bookie_id in list(self._records):
            record = self._records[bookie_id]
            while record.samples and record.samples[0][0] <= horizon_s:
                record.samples.popleft()
                record.sorted_cache = None
            if record.pending == 0 and record.last_seen_s <= horizon_s:
                del self._records[bookie_id]

    @property
    def tracked(self) -> int:
        return len(self._records)

    def _fresh(self, at_s: float | None, now_s: float) -> float | None:
        if at_s is None or now_s - at_s >= self.config.history_ttl_s:
            return None
        return at_s

    def _record(self, bookie_id: str, now_s: float | None) -> _Record:
        record = self._records.get(bookie_id)
        if record is None:
            seen_s = now_s if now_s is not None else -math.inf
            if len(self._records) >= self.config.tracked_bookies_max:
                self._evict(seen_s)
            record = _Record(seen_s, deque(maxlen=self.config.latency_samples_max))
            self._records[bookie_id] = record
        elif now_s is not None:
            record.last_seen_s = max(record.last_seen_s, now_s)
        return record

    def _evict(self, now_s: float) -> None:
        """Make room: drop expired history, then the bookie heard from least recently."""
        if math.isfinite(now_s):
            self.expire(now_s)
        if len(self._records) >= self.config.tracked_bookies_max:
            oldest = min(self._records, key=lambda b: self._records[b].last_seen_s)
            del self._records[oldest]
