"""Speculative read delays: follow observed latency, back off exponentially, stay within bounds."""

from __future__ import annotations

import pytest

from placement import BookieHealth, SpeculationConfig, speculative_delays

pytestmark = pytest.mark.unit

NOW_S = 500.0


def observed(latencies_s: dict[str, float]) -> BookieHealth:
    health = BookieHealth()
    for bookie_id, latency_s in latencies_s.items():
        for i in range(10):
            health.record_latency(bookie_id, latency_s, NOW_S - 1 + i * 0.01)
    return health


def test_without_history_the_default_is_used_and_backed_off() -> None:
    delays_s = speculative_delays(("a", "b", "c"), BookieHealth(), NOW_S)
    assert delays_s == pytest.approx((0.1, 0.2))


def test_delays_follow_each_bookies_observed_p99() -> None:
    health = observed({"a": 0.004, "b": 0.080})
    # a: 4 ms * 1.5; b: 80 ms * 1.5 outgrows the backed-off 12 ms.
    assert speculative_delays(("a", "b", "c"), health, NOW_S) == pytest.approx((0.006, 0.120))


def test_equal_latencies_back_off_exponentially() -> None:
    health = observed({"a": 0.010, "b": 0.010, "c": 0.010})
    delays_s = speculative_delays(("a", "b", "c", "d"), health, NOW_S)
    assert delays_s == pytest.approx((0.015, 0.030, 0.060))


def test_delays_are_capped() -> None:
    health = observed({"a": 1.8, "b": 0.01})
    assert speculative_delays(("a", "b", "c"), health, NOW_S) == pytest.approx((2.0, 2.0))


def test_delays_have_a_floor() -> None:
    health = observed({"a": 0.0001})
    assert speculative_delays(("a", "b"), health, NOW_S) == pytest.approx((0.002,))


def test_an_unavailable_bookie_is_not_waited_for() -> None:
    delays_s = speculative_delays(("down", "b", "c"), BookieHealth(), NOW_S, unavailable={"down"})
    assert delays_s == pytest.approx((0.002, 0.1))


def test_expired_history_falls_back_to_the_default() -> None:
    health = observed({"a": 0.004})
    assert speculative_delays(("a", "b"), health, NOW_S + 61) == pytest.approx((0.1,))


def test_bookkeepers_fixed_schedule_is_a_configuration() -> None:
    # BK defaults: 2 s, x2, capped at 2 s: every wait is 2 s whatever was observed.
    config = SpeculationConfig(floor_s=2.0, no_history_s=2.0, cap_s=2.0)
    health = observed({"a": 0.004})
    delays_s = speculative_delays(("a", "b", "c"), health, NOW_S, config=config)
    assert delays_s == pytest.approx((2.0, 2.0))


def test_one_replica_needs_no_delay() -> None:
    assert speculative_delays(("a",), BookieHealth(), NOW_S) == ()
    assert speculative_delays((), BookieHealth(), NOW_S) == ()
