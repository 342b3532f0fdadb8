"""Speculative read delays derived from observed latency, with exponential backoff and a cap.

BookKeeper waits a fixed 2 s (`speculativeReadTimeout`) before asking the next replica,
then backs off by 2x. Here the wait after asking replica k is its recent p99 latency times
a margin, so a fast local bookie is retried after milliseconds and a WAN bookie after its
round trip; each wait is at least the previous one times the backoff multiplier, never
below a floor (sub-millisecond p99s would double the read traffic) and never above the cap.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from placement.health import BookieHealth

QUANTILE = 0.99  # retry when an answer is later than almost every recent answer
P99_FACTOR = 1.5  # margin over the p99 so normal jitter rarely triggers a retry
BACKOFF_MULTIPLIER = 2.0  # BK speculativeReadTimeoutBackoffMultiplier
DELAY_FLOOR_S = 0.002
DELAY_CAP_S = 2.0  # BK's fixed speculativeReadTimeout becomes the ceiling
NO_HISTORY_DELAY_S = 0.1  # before any samples: above a WAN round trip, far below BK's 2 s
SAMPLES_MIN = 5  # fewer samples give no useful p99


@dataclass(frozen=True, slots=True)
class SpeculationConfig:
    quantile: float = QUANTILE
    p99_factor: float = P99_FACTOR
    backoff_multiplier: float = BACKOFF_MULTIPLIER
    floor_s: float = DELAY_FLOOR_S
    cap_s: float = DELAY_CAP_S
    no_history_s: float = NO_HISTORY_DELAY_S
    samples_min: int = SAMPLES_MIN

    def __post_init__(self) -> None:
        assert 0 < self.quantile <= 1, self.quantile
        assert self.p99_factor > 0, self.p99_factor
        assert self.backoff_multiplier >= 1, self.backoff_multiplier
        assert 0 < self.floor_s <= self.no_history_s <= self.cap_s, self


def speculative_delays(
    order: Sequence[str],
    health: BookieHealth,
    now_s: float,
    unavailable: Collection[str] = frozenset(),
    config: SpeculationConfig = SpeculationConfig(),
) -> tuple[float, ...]:
    """delays_s[k]: after asking order[k], how long to wait for any answer before asking order[k+1].

    One delay fewer than replicas. A bookie known to be unavailable gets the floor: waiting
    for an answer it cannot give only delays the read.
    """
    delays_s: list[float] = []
    previous_s = 0.0
    for bookie_id in order[:-1]:
        if bookie_id in unavailable:
            delay_s = config.floor_s
        else:
            delay_s = max(
                _base_delay_s(bookie_id, health, now_s, config),
                previous_s * config.backoff_multiplier,
            )
        delay_s = min(config.cap_s, max(config.floor_s, delay_s))
        delays_s.append(delay_s)
        previous_s = delay_s
    return tuple(delays_s)


def _base_delay_s(
    bookie_id: str, health: BookieHealth, now_s: float, config: SpeculationConfig
) -> float:
    p99_s = health.latency_quantile_s(bookie_id, config.quantile, now_s, config.samples_min)
    if p99_s is None:
        return config.no_history_s
    return p99_s * config.p99_factor
