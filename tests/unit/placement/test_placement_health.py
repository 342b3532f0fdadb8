"""Bookie health history: what counts, for how long, and how much of it is kept."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from placement import BookieHealth, HealthConfig
from placement.health import HISTORY_TTL_S, LATENCY_SAMPLES_MAX

pytestmark = pytest.mark.unit


def test_failure_counts_until_the_ttl_then_expires() -> None:
    health = BookieHealth()
    health.record_failure("b", 100.0)
    assert HISTORY_TTL_S == 60.0  # BookKeeper's bookieFailureHistoryExpirationMSec
    assert health.last_failure_s("b", 159.9) == 100.0
    assert health.last_failure_s("b", 160.0) is None


def test_a_later_failure_restarts_the_ttl() -> None:
    health = BookieHealth()
    health.record_failure("b", 100.0)
    health.record_failure("b", 150.0)
    assert health.last_failure_s("b", 200.0) == 150.0


def test_slow_mark_expires_with_a_custom_ttl() -> None:
    health = BookieHealth(HealthConfig(history_ttl_s=5.0))
    health.record_slow("b", 10.0)
    assert health.marked_slow("b", 14.0)
    assert not health.marked_slow("b", 15.0)


def test_latency_quantiles_use_nearest_rank_over_recent_samples() -> None:
    health = BookieHealth()
    for ms in range(1, 51):
        health.record_latency("b", ms / 1000, 100.0)
    assert health.latency_quantile_s("b", 0.99, 100.0) == pytest.approx(0.050)
    assert health.latency_quantile_s("b", 0.5, 100.0) == pytest.approx(0.025)
    assert health.latency_quantile_s("b", 0.5, 100.0, samples_min=51) is None
    assert health.latency_quantile_s("b", 0.5, 160.0) is None  # all expired


def test_latency_window_keeps_only_the_newest_samples() -> None:
    health = BookieHealth()
    for i in range(LATENCY_SAMPLES_MAX + 36):
        health.record_latency("b", float(i), 100.0 + i * 0.001)
    samples = health.latencies_s("b", 101.0)
    assert len(samples) == LATENCY_SAMPLES_MAX
    assert samples[0] == 36.0


def test_old_samples_drop_out_while_new_ones_stay() -> None:
    health = BookieHealth()
    health.record_latency("b", 9.0, 100.0)
    health.record_latency("b", 1.0, 150.0)
    assert health.latencies_s("b", 165.0) == (1.0,)


def test_tracked_bookies_are_bounded_and_the_least_recent_is_forgotten() -> None:
    health = BookieHealth(HealthConfig(tracked_bookies_max=3))
    for i in range(5):
        health.record_failure(f"b{i}", 100.0 + i)
    assert health.tracked == 3
    assert health.last_failure_s("b0", 105.0) is None
    assert health.last_failure_s("b4", 105.0) == 104.0


def test_expire_forgets_quiet_bookies_but_keeps_those_with_pending_requests() -> None:
    health = BookieHealth()
    health.record_failure("quiet", 100.0)
    health.record_failure("busy", 100.0)
    health.set_pending_requests("busy", 3)
    health.expire(200.0)
    assert health.tracked == 1
    assert health.pending_requests("busy") == 3
    assert health.pending_requests("quiet") == 0


def test_pending_requests_need_no_history_and_zero_clears_them() -> None:
    health = BookieHealth()
    health.set_pending_requests("b", 4)
    assert health.pending_requests("b") == 4
    health.set_pending_requests("b", 0)
    health.expire(0.0)
    assert health.tracked == 0


@given(
    st.lists(st.tuples(st.booleans(), st.floats(0, 200), st.floats(0, 5)), min_size=1, max_size=60),
    st.sampled_from([0.5, 0.9, 0.99, 1.0]),
)
def test_cached_quantiles_equal_quantiles_recomputed_from_the_samples(
    steps: list[tuple[bool, float, float]], quantile: float
) -> None:
    health = BookieHealth(HealthConfig(history_ttl_s=30.0, latency_samples_max=16))
    samples: list[tuple[float, float]] = []
    for is_sample, now_s, latency_s in steps:
        if is_sample:
            health.record_latency("b", latency_s, now_s)
            samples = [*samples, (now_s, latency_s)][-16:]
            continue
        fresh = sorted(lat for at_s, lat in samples if at_s > now_s - 30.0)
        expected = fresh[math.ceil(quantile * len(fresh)) - 1] if fresh else None
        assert health.latency_quantile_s("b", quantile, now_s) == expected


def test_a_failure_counts_as_silence_only_until_the_bookie_answers_again() -> None:
    health = BookieHealth()
    assert health.silent_since_failure_s("b1", 0.0) is None
    health.record_latency("b1", 0.01, 5.0)
    health.record_failure("b1", 10.0)  # a cut: nothing answered since
    assert health.silent_since_failure_s("b1", 11.0) == 10.0
    health.record_latency("b1", 0.01, 12.0)  # it answered: reachable after all
    assert health.silent_since_failure_s("b1", 12.5) is None
    assert health.last_failure_s("b1", 12.5) == 10.0  # placement's quarantine still sees it
    health.record_failure("b1", 13.0)
    assert health.silent_since_failure_s("b1", 13.5) == 13.0
    assert health.silent_since_failure_s("b1", 13.0 + HISTORY_TTL_S + 1) is None  # expired
