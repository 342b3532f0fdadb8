"""When a failing bookie may be tried again: exponential backoff with jitter and a cap.

Pure: time is an input and the jitter draws from an injected `random.Random`. The connection
pool asks `admits(now)` before dialling a bookie, so a bookie that keeps failing is reported
unavailable at once instead of every request waiting for its own timeout.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from core.errors import GlobelogError

RECONNECT_BACKOFF_BASE_S = 0.05  # the wait after a first failure: a restart is retried soon
RECONNECT_BACKOFF_MULTIPLIER = 2.0
RECONNECT_BACKOFF_CAP_S = 5.0  # BookKeeper's request timeout: a dead bookie is probed that often
# Each wait is drawn from [ceiling * (1 - fraction), ceiling], so clients that failed together
# do not all reconnect together, and a wait is never below half its step.
RECONNECT_JITTER_FRACTION = 0.5
# Beyond this many doublings the cap has long been reached; bounds the float exponent.
BACKOFF_EXPONENT_MAX = 32


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    base_s: float = RECONNECT_BACKOFF_BASE_S
    multiplier: float = RECONNECT_BACKOFF_MULTIPLIER
    cap_s: float = RECONNECT_BACKOFF_CAP_S
    jitter_fraction: float = RECONNECT_JITTER_FRACTION

    def __post_init__(self) -> None:
        assert 0 < self.base_s <= self.cap_s, (self.base_s, self.cap_s)
        assert self.multiplier >= 1, self.multiplier
        assert 0 <= self.jitter_fraction < 1, self.jitter_fraction

    def ceiling_s(self, failures: int) -> float:
        """The longest wait after `failures` consecutive failures (before jitter)."""
        assert failures >= 1, failures
        exponent = min(failures - 1, BACKOFF_EXPONENT_MAX)
        return min(self.cap_s, self.base_s * self.multiplier**exponent)

    def delay_s(self, failures: int, unit_random: float) -> float:
        """The wait after `failures` consecutive failures; `unit_random` in [0, 1) is the jitter."""
        assert 0 <= unit_random < 1, unit_random
        return self.ceiling_s(failures) * (1 - self.jitter_fraction * unit_random)


class ReconnectState:
    """One bookie's consecutive failures and the time before which it is not tried again."""

    def __init__(self, policy: BackoffPolicy, rng: random.Random) -> None:
        self.policy = policy
        self._rng = rng
        self.failures = 0
        self.retry_at_s = 0.0
        self.last_error: GlobelogError | None = None

    def admits(self, now_s: float) -> bool:
        """Whether the bookie may be tried now."""
        return self.failures == 0 or now_s >= self.retry_at_s

    def failed(self, now_s: float, error: GlobelogError) -> bool:
        """Records a failure; returns whether it started a new, longer backoff.

        Failures seen during a backoff are the same episode (every request of a window fails
        together when a connection dies), so they do not lengthen it.
        """
        self.last_error = error
        if not self.admits(now_s):
            return False
        self.failures += 1
        self.retry_at_s = now_s + self.policy.delay_s(self.failures, self._rng.random())
        return True

    def succeeded(self) -> None:
        """The bookie answered a request: forget its failures."""
        self.failures = 0
        self.retry_at_s = 0.0
        self.last_error = None
