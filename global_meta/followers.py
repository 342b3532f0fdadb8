"""Followers under supervision: a named background loop, restarted with backoff when it fails.

A follower keeps a view current for as long as its owner runs: a ZooKeeper watch follower, a
drain follower, a stream cache's read-ahead. One that stops for good on its first error leaves
the view stale with nothing to show for it (a read proxy's stream caches stopped at a lost
ZooKeeper session and stayed stopped while its health said serving). So each one runs under a
`Follower`, which

- restarts its loop after a failure, waiting a capped exponential backoff first, with jitter
  (the caches of a read proxy all fail together when its region is cut off; without it they
  would all restart together at each step after the heal);
- keeps its state for health and metrics: starting, running, restarting (since when, after
  how many restarts, and why), finished;
- on `stop()` cancels the loop and waits, within a bound, until it has ended (I8).

    follower = Follower("drained streams of us-east", watch.follow, on_failed=count)
    follower.start()
    ...
    follower.status()          # FollowerStatus(state=RUNNING, restarts=0, ...)
    await follower.stop()

The loop is called with `following`, a callback it calls once it follows (its watch has given
its first value, its reader is open): until then a restarted follower still counts as
restarting, so health does not call a loop that fails at once on every try "running".

Why in global_meta: every layer that runs a follower (ledger, reader, region) may import this
package, and every follower follows the metadata its store serves. It holds no IO of its own,
only an asyncio task; the clock and the sleep are seams, so tests drive restarts without
sleeping.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from core import runtime
from core.errors import GlobelogError

log = logging.getLogger(__name__)

# The first restart comes soon (most failures are a moment without ZooKeeper); later ones wait
# longer, up to the cap, which bounds how long a follower stays down after its cause is gone.
RESTART_BACKOFF_FIRST_S = 0.1
RESTART_BACKOFF_MULTIPLIER = 2.0
RESTART_BACKOFF_CAP_S = 2.0
# Each wait is drawn from [step * (1 - fraction), step]: never longer than the step (the cap
# keeps its meaning) and never below half of it.
RESTART_JITTER_FRACTION = 0.5
STOP_TIMEOUT_S = 5.0  # a loop cancelled by stop() ends within this (it never ignores a cancel)
ERROR_TEXT_CHARS_MAX = 500  # the last error as health shows it


class FollowerState(enum.Enum):
    STARTING = "starting"  # started; its loop has not said it follows yet
    RUNNING = "running"  # following
    RESTARTING = (
        "restarting"  # failed: waiting out its backoff, or started again and not yet following
    )
    FINISHED = "finished"  # its loop returned: there is nothing more to follow
    STOPPED = "stopped"  # stopped by its owner


@dataclass(frozen=True, slots=True)
class RestartBackoff:
    first_s: float = RESTART_BACKOFF_FIRST_S
    multiplier: float = RESTART_BACKOFF_MULTIPLIER
    cap_s: float = RESTART_BACKOFF_CAP_S
    jitter_fraction: float = RESTART_JITTER_FRACTION

    def __post_init__(self) -> None:
        assert 0 < self.first_s <= self.cap_s, (self.first_s, self.cap_s)
        assert self.multiplier >= 1, self.multiplier
        assert 0 <= self.jitter_fraction < 1, self.jitter_fraction

    def delay_s(self, failures: int, unit_random: float = 0.0) -> float:
        """The wait before the restart after `failures` consecutive failures (>= 1);
        `unit_random` in [0, 1) is the jitter (0: the whole step)."""
        assert failures >= 1, failures
        assert 0 <= unit_random < 1, unit_random
        exponent = min(failures - 1, 32)  # far past the cap already; bounds the float
        step_s = min(self.cap_s, self.first_s * self.multiplier**exponent)
        return step_s * (1 - self.jitter_fraction * unit_random)


@dataclass(frozen=True, slots=True)
class FollowerStatus:
    """A follower's state as health and metrics show it."""

    name: str
    state: FollowerState
    since_s: (
        float  # the supervisor's clock when the state began (a restart streak: its first failure)
    )
    restarts: int  # failures so far, each followed by a restart unless stopped meanwhile
    last_error: str | None  # "code: message" of the newest failure

    @property
    def following(self) -> bool:
        """False while the view it keeps may be stale (starting, restarting, stopped)."""
        return self.state in (FollowerState.RUNNING, FollowerState.FINISHED)

    def describe(self, now_s: float) -> dict[str, Any]:
        """The JSON health shows for it."""
        return {
            "state": self.state.value,
            "for_s": round(max(0.0, now_s - self.since_s), 1),
            "restarts": self.restarts,
            "last_error": self.last_error,
        }


FollowerLoop = Callable[[Callable[[], None]], Awaitable[None]]


class Follower:
    """Runs `loop` as a supervised task: see the module docstring."""

    def __init__(
        self,
        name: str,
        loop: FollowerLoop,
        *,
        backoff: RestartBackoff | None = None,
        on_failed: Callable[[FollowerStatus], None] | None = None,
        clock: Callable[[], float] = runtime.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        stop_timeout_s: float = STOP_TIMEOUT_S,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self._loop = loop
        self._backoff = backoff or RestartBackoff()
        self._on_failed = on_failed
        self._clock = clock
        self._sleep = sleep
        self._stop_timeout_s = stop_timeout_s
        self._rng = rng or runtime.new_rng()  # a seed of its own: followers do not move together
        self._task: asyncio.Task[None] | None = None
        self._state = FollowerState.STARTING
        self._since_s = clock()
        self._restarts = 0
        self._last_error: str | None = None
        self._following_since_s: float | None = None  # of the current run of the loop

    def start(self) -> None:
        assert self._task is None, f"follower {self.name!r} started twice"
        self._since_s = self._clock()
        self._task = asyncio.get_running_loop().create_task(
            self._supervise(), name=f"follower {self.name}"
        )

    def status(self) -> FollowerStatus:
        return FollowerStatus(
            self.name, self._state, self._since_s, self._restarts, self._last_error
        )

    async def stop(self) -> None:
        """Cancels the loop and waits until it has ended; raises what the supervision
        itself failed with (a bug: the loop's own failures are restarted, not raised)."""
        task = self._task
        if task is None:
            self._set(FollowerState.STOPPED)
            return
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=self._stop_timeout_s)
        if not done:
            # A loop that swallows its cancellation would outlive its owner: a bug to fix.
            raise AssertionError(
                f"follower {self.name!r} still runs {self._stop_timeout_s} s after its stop"
            )
        self._set(FollowerState.STOPPED)
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error

    async def __aenter__(self) -> Follower:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------------ supervision

    def _set(self, state: FollowerState) -> None:
        if state is not self._state:
            self._state = state
            self._since_s = self._clock()

    def _following(self) -> None:
        """Called by the loop once it follows."""
        if self._following_since_s is None:
            self._following_since_s = self._clock()
            self._set(FollowerState.RUNNING)

    async def _supervise(self) -> None:
        failures = 0  # in a row: a run that followed for a whole backoff cap starts afresh
        while True:
            self._following_since_s = None
            try:
                await self._loop(self._following)
            except asyncio.CancelledError:
                if self._stopping():
                    raise  # stopped by our owner
                error: BaseException = RuntimeError("the loop was cancelled from inside")
            except Exception as err:  # noqa: BLE001 - every failure restarts the loop
                error = err
            else:
                self._set(FollowerState.FINISHED)
                return
            if self._stopping():
                # Stopped while the loop failed: its cleanup raised over our cancellation,
                # which is gone with it. A restart would outlive the owner's stop (I8).
                self._failed_stopping(error)
                raise asyncio.CancelledError
            followed_s = (
                0.0 if self._following_since_s is None else self._clock() - self._following_since_s
            )
            failures = 1 if followed_s >= self._backoff.cap_s else failures + 1
            self._failed(error)
            await self._sleep(self._backoff.delay_s(failures, self._rng.random()))

    @staticmethod
    def _stopping() -> bool:
        """True when the supervising task is being cancelled (by stop(), or its owner)."""
        current = asyncio.current_task()
        return current is not None and current.cancelling() > 0

    def _failed(self, error: BaseException) -> None:
        if self._state is not FollowerState.RESTARTING:
            self._set(FollowerState.RESTARTING)
        self._restarts += 1
        self._last_error = _error_text(error)[:ERROR_TEXT_CHARS_MAX]
        if isinstance(error, GlobelogError):  # an operating condition: ZooKeeper away, ...
            log.warning("follower %s failed (restart %d): %s", self.name, self._restarts, error)
        else:  # a bug: its traceback is what fixes it
            log.error("follower %s failed (restart %d)", self.name, self._restarts, exc_info=error)
        if self._on_failed is not None:
            try:
                self._on_failed(self.status())
            except Exception:  # a broken metric must not stop the follower
                log.exception("follower %s: its on_failed callback failed (a bug)", self.name)

    def _failed_stopping(self, error: BaseException) -> None:
        """The loop failed as it was being stopped: no restart, the error kept for health."""
        self._last_error = _error_text(error)[:ERROR_TEXT_CHARS_MAX]
        log.error("follower %s failed while it was being stopped", self.name, exc_info=error)


async def run_together(*coroutines: Coroutine[Any, Any, None]) -> None:
    """Runs the coroutines until every one has ended; the first to fail has the others
    cancelled (and waited for) and its error raised as itself.

    For follower loops, in place of asyncio.TaskGroup: on Python 3.11 a TaskGroup whose child
    fails after the group's body has ended cancels the calling task and never takes that
    request back, so the Follower supervising the loop would take the failure for its own
    stop and never restart it.
    """
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error


def _error_text(error: BaseException) -> str:
    code = error.code if isinstance(error, GlobelogError) else type(error).__name__
    return f"{code}: {error}"
