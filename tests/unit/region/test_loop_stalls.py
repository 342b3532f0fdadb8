"""The proxies time what stops their event loop: the cyclic garbage collector's collections,
and how late the loop runs a timer; each warns of a long one. What survives is frozen out of
the collector's walks, and thawed and collected once in a while."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import weakref

import pytest

from region.observability import telemetry
from region.process import event_loop


def test_every_collection_is_timed_with_its_generation_and_a_long_one_is_logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[float, int]] = []
    monkeypatch.setattr(telemetry, "GC_PAUSE_WARN_S", 60.0)
    callback = telemetry.time_collections(lambda s, g: seen.append((s, g)))
    try:
        gc.collect(1)
        gc.collect(2)
        assert [g for _, g in seen][-2:] == [1, 2]
        assert all(seconds >= 0 for seconds, _ in seen)
        assert not caplog.records, "collections under the bound are not logged"
        monkeypatch.setattr(telemetry, "GC_PAUSE_WARN_S", 0.0)  # every one is long now
        with caplog.at_level(logging.WARNING, logger=telemetry.__name__):
            gc.collect(2)
        assert "generation-2 garbage collection stopped the loop" in caplog.text
    finally:
        gc.callbacks.remove(callback)
    count = len(seen)
    gc.collect()
    assert len(seen) == count, "removed, it records nothing more"


async def test_the_loop_lag_is_measured_every_tick_and_a_long_one_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lags: list[float] = []
    watching = asyncio.ensure_future(telemetry.watch_loop_lag(lags.append))
    try:
        await asyncio.sleep(3 * telemetry.LOOP_LAG_TICK_S)
        ticks = len(lags)
        assert ticks >= 1 and all(lag >= 0 for lag in lags)
        with caplog.at_level(logging.WARNING, logger=telemetry.__name__):
            await asyncio.sleep(0)
            time.sleep(telemetry.LOOP_LAG_TICK_S + telemetry.LOOP_LAG_WARN_S + 0.05)  # noqa: ASYNC251 (the stall under test)
            await asyncio.sleep(2 * telemetry.LOOP_LAG_TICK_S)
        # the timer was due at most a tick after the block began: at least the rest was lag
        assert max(lags[ticks:]) >= telemetry.LOOP_LAG_WARN_S
        assert "the event loop ran" in caplog.text and "ms late" in caplog.text
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


async def test_survivors_are_frozen_every_tick_and_a_thaw_collects_their_cycles() -> None:
    """Frozen, a cycle that dies is not collected (no full collection walks it) until the next
    thaw, which collects the whole heap once."""
    first, second = Node(), Node()
    first.other, second.other = second, first  # a cycle: reference counting cannot free it
    gone = weakref.ref(first)
    freezing = asyncio.ensure_future(event_loop.keep_survivors_frozen(0.05, thaw_every_s=0.5))
    try:
        await asyncio.sleep(0.15)
        assert gc.get_freeze_count() > 0
        del first, second
        gc.collect()
        assert gone() is not None, "frozen: out of the collector's walks"
        await asyncio.sleep(0.6)  # a thaw came: everything collected once, then frozen again
        assert gone() is None
        assert gc.get_freeze_count() > 0
    finally:
        freezing.cancel()
        await asyncio.gather(freezing, return_exceptions=True)
        gc.unfreeze()


async def test_a_background_task_that_fails_says_so_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails() -> None:
        raise OSError("the disk is gone")

    async def waits() -> None:
        await asyncio.Event().wait()

    with caplog.at_level(logging.ERROR, logger=event_loop.__name__):
        failing, waiting = event_loop.start_background(fails(), waits())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert failing.done() and not waiting.done()
        assert "background task" in caplog.text and "the disk is gone" in caplog.text
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
    assert caplog.text.count("failed") == 1, "a cancelled one is not a failure"


async def test_stopping_background_work_waits_for_its_clean_up_within_a_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cleaned: list[str] = []

    async def cleans_up() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.05)  # its own questions cancelled and awaited, say
            cleaned.append("done")

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.shield(asyncio.sleep(1.0))  # a clean-up past the bound

    with caplog.at_level(logging.WARNING, logger=event_loop.__name__):
        tasks = event_loop.start_background(cleans_up(), slow_to_stop())
        await asyncio.sleep(0)
        await event_loop.stop_background(tasks, timeout_s=0.5)
        assert cleaned == ["done"], "its clean-up ran before the stop returned"
        assert not tasks[1].done() and "did not end within 0.5 s" in caplog.text
    await asyncio.wait([tasks[1]])  # it ends by itself a little later


class Clock:
    """Stands in for the time module in event_loop: its monotonic clock moves when told."""

    now = 1000.0

    @classmethod
    def monotonic(cls) -> float:
        return cls.now


async def test_what_a_full_collection_leaves_alive_is_frozen_once_in_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(event_loop, "time", Clock)
    # only the collections made here, and only this freezer's callback (an earlier test's
    # server may have left its own in the process)
    others = gc.callbacks[:]
    gc.callbacks.clear()
    gc.disable()
    thresholds = gc.get_threshold()
    freezing = asyncio.ensure_future(event_loop.keep_survivors_frozen(3600, thaw_every_s=7200))
    try:
        await asyncio.sleep(0)  # its callback is in
        assert gc.get_threshold()[2] == event_loop.FULL_AFTER_YOUNG
        gc.unfreeze()
        kept = [Node() for _ in range(1000)]
        Clock.now += event_loop.FREEZE_AFTER_FULL_S - 1
        gc.collect(2)
        assert gc.get_freeze_count() == 0, "not within FREEZE_AFTER_FULL_S of the last freeze"
        Clock.now += 1
        gc.collect(1)
        assert gc.get_freeze_count() == 0, "a young collection freezes nothing"
        gc.collect(2)
        assert gc.get_freeze_count() >= len(kept), "the survivors of the full one are frozen"
        freezing.cancel()
        await asyncio.gather(freezing, return_exceptions=True)
        assert gc.get_threshold() == thresholds, "the collector's own schedule back once stopped"
        gc.unfreeze()
        Clock.now += 3600
        gc.collect(2)
        assert gc.get_freeze_count() == 0, "once stopped, a full collection freezes nothing"
    finally:
        freezing.cancel()
        await asyncio.gather(freezing, return_exceptions=True)
        gc.unfreeze()
        gc.enable()
        gc.callbacks.extend(others)
