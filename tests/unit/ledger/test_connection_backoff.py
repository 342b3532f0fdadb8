"""Reconnect backoff: the exponential schedule, its jitter and cap, and failure episodes."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import GlobelogError
from ledger.connections.backoff import (
    RECONNECT_BACKOFF_BASE_S,
    RECONNECT_BACKOFF_CAP_S,
    BackoffPolicy,
    ReconnectState,
)
from ledger.errors import BookieUnavailableError

pytestmark = pytest.mark.unit

ERROR = BookieUnavailableError("bookie b:1: cannot connect")


def test_the_ceiling_doubles_from_the_base_up_to_the_cap() -> None:
    policy = BackoffPolicy(base_s=0.1, multiplier=2.0, cap_s=1.0)
    assert [policy.ceiling_s(n) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert policy.ceiling_s(10**9) == 1.0  # no overflow however long a bookie stays down


def test_default_schedule_starts_small_and_is_capped() -> None:
    policy = BackoffPolicy()
    assert policy.ceiling_s(1) == RECONNECT_BACKOFF_BASE_S
    assert policy.ceiling_s(100) == RECONNECT_BACKOFF_CAP_S


@given(failures=st.integers(1, 200), unit=st.floats(0, 1, exclude_max=True))
def test_jitter_keeps_each_wait_between_half_its_ceiling_and_the_ceiling(
    failures: int, unit: float
) -> None:
    policy = BackoffPolicy(base_s=0.05, cap_s=5.0, jitter_fraction=0.5)
    ceiling = policy.ceiling_s(failures)
    assert ceiling / 2 <= policy.delay_s(failures, unit) <= ceiling


def test_jittered_schedule_is_reproducible_with_a_seeded_rng() -> None:
    def schedule(seed: int) -> list[float]:
        state = ReconnectState(BackoffPolicy(base_s=0.1, cap_s=2.0), random.Random(seed))
        now, waits = 0.0, []
        for _ in range(8):
            assert state.failed(now, ERROR)
            waits.append(state.retry_at_s - now)
            now = state.retry_at_s
        return waits

    assert schedule(7) == schedule(7) != schedule(8)
    waits = schedule(7)
    assert all(0.05 <= w <= 0.1 for w in waits[:1]) and all(1.0 <= w <= 2.0 for w in waits[5:])


def test_a_failing_bookie_is_refused_until_its_backoff_ends() -> None:
    state = ReconnectState(
        BackoffPolicy(base_s=1.0, cap_s=8.0, jitter_fraction=0.0), random.Random(1)
    )
    assert state.admits(0.0)
    assert state.failed(10.0, ERROR)
    assert not state.admits(10.5) and state.admits(11.0)
    assert state.failures == 1 and state.last_error is ERROR


def test_failures_during_a_backoff_are_one_episode() -> None:
    # Every request of a window fails when its connection dies: that is one failure, not 100.
    state = ReconnectState(
        BackoffPolicy(base_s=1.0, cap_s=8.0, jitter_fraction=0.0), random.Random(1)
    )
    assert state.failed(0.0, ERROR)
    later: GlobelogError = BookieUnavailableError("again")
    assert not any(state.failed(0.5, later) for _ in range(100))
    assert state.failures == 1 and state.retry_at_s == 1.0 and state.last_error is later
    assert state.failed(1.0, ERROR)  # the probe after the backoff failed: a longer wait
    assert state.failures == 2 and state.retry_at_s == 3.0


def test_an_answer_forgets_every_failure() -> None:
    state = ReconnectState(BackoffPolicy(jitter_fraction=0.0), random.Random(1))
    state.failed(0.0, ERROR)
    state.failed(1.0, ERROR)
    state.succeeded()
    assert state.failures == 0 and state.admits(1.0) and state.last_error is None
    assert state.failed(1.0, ERROR) and state.retry_at_s == 1.0 + RECONNECT_BACKOFF_BASE_S


def test_policies_refuse_nonsense() -> None:
    with pytest.raises(AssertionError):
        BackoffPolicy(base_s=2.0, cap_s=1.0)
    with pytest.raises(AssertionError):
        BackoffPolicy(jitter_fraction=1.0)
    with pytest.raises(AssertionError):
        BackoffPolicy().ceiling_s(0)
