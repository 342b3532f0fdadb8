"""Follower supervision: restarts with capped backoff, state for health, stops that end the task.

Driven by a scripted loop and a fake clock: the loop does what the test's orders say, the
supervisor's backoff sleeps advance the fake clock at once, and the test waits on the loop's
own signals (a run started, an order done), never on time.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from core.errors import MetadataUnavailableError
from global_meta.followers import (
    Follower,
    FollowerState,
    FollowerStatus,
    RestartBackoff,
    run_together,
)

FOLLOW, RETURN = "follow", "return"
Order = str | BaseException


@dataclass
class FakeTime:
    now_s: float = 100.0
    slept_s: list[float] = field(default_factory=list)
    hold: asyncio.Event | None = None  # set: sleeps wait for it (a backoff in progress)
    sleeping: asyncio.Event = field(default_factory=asyncio.Event)

    def clock(self) -> float:
        return self.now_s

    async def sleep(self, delay_s: float) -> None:
        self.slept_s.append(delay_s)
        self.sleeping.set()
        if self.hold is not None:
            await self.hold.wait()
        self.now_s += delay_s


class ScriptedLoop:
    """A follower loop that obeys orders: follow, raise an error, or return."""

    def __init__(self) -> None:
        self.orders: asyncio.Queue[Order] = asyncio.Queue()
        self.runs: asyncio.Queue[int] = asyncio.Queue()  # each run's number as it starts
        self.done: asyncio.Queue[str] = asyncio.Queue()  # each order carried out ("follow")
        self.cleaned_up = 0  # runs that left through their finally
        self.ended = asyncio.Event()  # a run left (the supervisor sees it in the same step)
        self.count = 0

    async def __call__(self, following: Callable[[], None]) -> None:
        self.count += 1
        await self.runs.put(self.count)
        try:
            while True:
                order = await self.orders.get()
                if isinstance(order, BaseException):
                    raise order
                if order == RETURN:
                    return
                following()
                await self.done.put(order)
        finally:
            self.cleaned_up += 1
            self.ended.set()

    async def order(self, order: Order) -> None:
        """Gives an order and waits until it is carried out (a failure: the next run)."""
        await self.orders.put(order)
        if order == FOLLOW:
            await self.done.get()
        elif isinstance(order, BaseException):
            await self.runs.get()


def follower(
    loop: ScriptedLoop, time: FakeTime, failed: list[FollowerStatus] | None = None
) -> Follower:
    return Follower(
        "drained streams of us-east",
        loop,
        # no jitter: the steps are exact here (the jitter has its own test)
        backoff=RestartBackoff(first_s=0.1, multiplier=2.0, cap_s=1.0, jitter_fraction=0.0),
        on_failed=None if failed is None else failed.append,
        clock=time.clock,
        sleep=time.sleep,
        stop_timeout_s=1.0,
    )


def unavailable() -> MetadataUnavailableError:
    return MetadataUnavailableError("children '/globelog/drain/us-east': no ZooKeeper session")


async def test_a_failing_loop_is_restarted_with_capped_backoff_and_shows_it() -> None:
    loop, time, failed = ScriptedLoop(), FakeTime(), []
    async with follower(loop, time, failed) as supervised:
        assert await loop.runs.get() == 1
        assert supervised.status().state is FollowerState.STARTING
        await loop.order(FOLLOW)
        assert supervised.status().state is FollowerState.RUNNING
        assert supervised.status().following
        began_s = time.now_s
        for _ in range(6):
            await loop.order(unavailable())
        status = supervised.status()
        assert time.slept_s == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
        assert status.state is FollowerState.RESTARTING and not status.following
        assert status.restarts == 6 and [s.restarts for s in failed] == [1, 2, 3, 4, 5, 6]
        assert status.since_s == began_s, "restarting since the first failure of the streak"
        assert status.last_error == (
            "metadata_unavailable: children '/globelog/drain/us-east': no ZooKeeper session"
        )
        assert status.describe(began_s + 3.04) == {
            "state": "restarting",
            "for_s": 3.0,
            "restarts": 6,
            "last_error": status.last_error,
        }
        await loop.order(FOLLOW)
        assert supervised.status().state is FollowerState.RUNNING
        assert supervised.status().restarts == 6, "the count of restarts stays"
    assert loop.count == 7 and loop.cleaned_up == 7


async def test_the_backoff_starts_afresh_only_after_a_run_that_followed_for_a_cap() -> None:
    loop, time = ScriptedLoop(), FakeTime()
    async with follower(loop, time):
        await loop.runs.get()
        await loop.order(unavailable())
        await loop.order(FOLLOW)
        await loop.order(unavailable())  # followed for no time: the streak goes on
        await loop.order(FOLLOW)
        time.now_s += 1.0  # followed for a whole cap
        await loop.order(unavailable())
    assert time.slept_s == [0.1, 0.2, 0.1]


async def test_a_bug_in_the_loop_is_restarted_and_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop, time = ScriptedLoop(), FakeTime()
    with caplog.at_level(logging.WARNING, logger="global_meta.followers"):
        async with follower(loop, time) as supervised:
            await loop.runs.get()
            await loop.order(KeyError("segment 7"))
            assert supervised.status().last_error == "KeyError: 'segment 7'"
            await loop.order(unavailable())
    bug, condition = caplog.records
    assert bug.levelno == logging.ERROR and bug.exc_info is not None
    assert condition.levelno == logging.WARNING and condition.exc_info is None
    assert "no ZooKeeper session" in condition.getMessage()


async def test_a_loop_cancelled_from_inside_is_a_failure_not_a_stop() -> None:
    loop, time = ScriptedLoop(), FakeTime()
    async with follower(loop, time) as supervised:
        await loop.runs.get()
        await loop.order(asyncio.CancelledError())
        assert supervised.status().state is FollowerState.RESTARTING
        assert supervised.status().last_error == "RuntimeError: the loop was cancelled from inside"


async def test_a_loop_that_returns_is_finished_and_not_restarted() -> None:
    loop, time = ScriptedLoop(), FakeTime()
    supervised = follower(loop, time)
    supervised.start()
    await loop.runs.get()
    await loop.orders.put(RETURN)
    await loop.ended.wait()
    assert supervised.status().state is FollowerState.FINISHED
    assert supervised.status().following
    await supervised.stop()
    assert loop.count == 1 and time.slept_s == []


async def test_stop_ends_the_task_during_a_backoff_and_leaves_nothing_pending() -> None:
    loop, time = ScriptedLoop(), FakeTime(hold=asyncio.Event())
    supervised = follower(loop, time)
    supervised.start()
    await loop.runs.get()
    await loop.orders.put(unavailable())
    await time.sleeping.wait()
    await supervised.stop()
    assert supervised.status().state is FollowerState.STOPPED
    assert loop.cleaned_up == 1
    assert [t for t in asyncio.all_tasks() if t.get_name().startswith("follower ")] == []


async def test_stop_of_a_loop_that_swallows_its_cancellation_fails_loudly() -> None:
    release = asyncio.Event()

    async def stubborn(following: Callable[[], None]) -> None:
        following()
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    supervised = Follower("stubborn", stubborn, stop_timeout_s=0.01)
    supervised.start()
    await asyncio.sleep(0)
    with pytest.raises(AssertionError, match=r"still runs 0\.01 s after its stop"):
        await supervised.stop()
    release.set()
    await supervised.stop()  # a second stop reaps it once it ends


async def test_a_failing_on_failed_callback_is_logged_as_a_bug_and_the_follower_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    def broken_metrics(status: FollowerStatus) -> None:
        calls.append(status.restarts)
        raise ZeroDivisionError("metrics")

    loop, time = ScriptedLoop(), FakeTime()
    supervised = Follower(
        "with broken metrics", loop, on_failed=broken_metrics, clock=time.clock, sleep=time.sleep
    )
    with caplog.at_level(logging.ERROR, logger="global_meta.followers"):
        supervised.start()
        await loop.runs.get()
        await loop.order(unavailable())  # restarted although the callback failed
        await loop.order(unavailable())
        await loop.order(FOLLOW)
        assert supervised.status().state is FollowerState.RUNNING
        await supervised.stop()  # the supervision itself never failed: nothing to raise
    assert calls == [1, 2] and supervised.status().restarts == 2
    bugs = [r for r in caplog.records if "on_failed callback failed" in r.getMessage()]
    assert len(bugs) == 2 and all(r.exc_info is not None for r in bugs)


async def test_a_cleanup_that_fails_during_a_stop_does_not_turn_the_stop_into_a_restart() -> None:
    """The loop's cleanup raises while the stop's cancellation passes through it: the
    cancellation is gone with it, and the supervisor must end rather than restart."""
    loop, time = ScriptedLoop(), FakeTime()
    cleanup_failed = asyncio.Event()

    async def failing_cleanup(following: Callable[[], None]) -> None:
        try:
            await loop(following)
        finally:
            cleanup_failed.set()
            raise unavailable()  # e.g. closing a reader without a ZooKeeper session

    supervised = Follower(
        "drained streams of us-east",
        failing_cleanup,
        clock=time.clock,
        sleep=time.sleep,
        stop_timeout_s=1.0,
    )
    supervised.start()
    await loop.runs.get()
    await loop.order(FOLLOW)
    await supervised.stop()  # ended within its bound: no AssertionError
    assert cleanup_failed.is_set()
    status = supervised.status()
    assert status.state is FollowerState.STOPPED and loop.count == 1 and time.slept_s == []
    assert status.last_error is not None and "no ZooKeeper session" in status.last_error
    assert [t for t in asyncio.all_tasks() if t.get_name().startswith("follower ")] == []


async def test_restart_waits_are_jittered_by_the_followers_own_random_within_each_step() -> None:
    backoff = RestartBackoff(first_s=0.1, multiplier=2.0, cap_s=1.0)  # jitter: half a step
    slept: list[list[float]] = []
    for seed in (7, 7, 8):
        loop, time = ScriptedLoop(), FakeTime()
        supervised = Follower(
            "stream cache of 'orders'",
            loop,
            backoff=backoff,
            clock=time.clock,
            sleep=time.sleep,
            rng=random.Random(seed),
        )
        supervised.start()
        await loop.runs.get()
        for _ in range(5):
            await loop.order(unavailable())
        await supervised.stop()
        slept.append(time.slept_s)
    same_seed, again, other_seed = slept
    assert same_seed == again, "a seed replays its waits"
    assert same_seed != other_seed, "followers with their own seeds do not restart together"
    for delays in slept:
        for step_s, delay_s in zip([0.1, 0.2, 0.4, 0.8, 1.0], delays, strict=True):
            assert step_s / 2 <= delay_s <= step_s


async def _fails_after(delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    raise MetadataUnavailableError("no ZooKeeper session")


async def _runs_until_cancelled(cancelled: list[str]) -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        cancelled.append("sibling")
        raise


async def test_run_together_raises_the_first_failure_as_itself_and_cancels_the_rest() -> None:
    cancelled: list[str] = []
    with pytest.raises(MetadataUnavailableError):
        await run_together(_fails_after(0), _runs_until_cancelled(cancelled))
    assert cancelled == ["sibling"]
    current = asyncio.current_task()
    assert current is not None and current.cancelling() == 0  # no request left behind


@pytest.mark.parametrize("use_task_group", [False, True])
async def test_a_loop_whose_concurrent_part_fails_is_restarted(use_task_group: bool) -> None:
    """Python 3.11's TaskGroup leaves a cancellation request on a loop whose child fails after
    the group's body: the Follower takes it for its own stop and ends for good. run_together
    does not."""
    starts = 0

    async def loop(following: Callable[[], None]) -> None:
        nonlocal starts
        starts += 1
        following()
        if use_task_group:
            async with asyncio.TaskGroup() as group:
                group.create_task(_fails_after(0.01))
        else:
            await run_together(_fails_after(0.01))

    follower = Follower("concurrent", loop, backoff=RestartBackoff(0.001, 2.0, 0.002))
    follower.start()
    for _ in range(200):
        await asyncio.sleep(0.01)
        if starts >= 3:
            break
    await follower.stop()
    if use_task_group:
        assert starts == 1, "on 3.11 the TaskGroup's leftover request stops the follower"
    else:
        assert starts >= 3
