"""The abuse benchmark's canary runs an open loop: its rounds start on a fixed period however
long earlier ones take, so a slow spell is sampled as often as a quick one (a closed loop
would start fewer rounds while the proxies are slow and under-count exactly those)."""

from __future__ import annotations

import asyncio
import time

from benchmarks.proxies.abuse import open_loop

PERIOD_S = 0.01


async def test_rounds_start_on_the_period_while_earlier_ones_are_still_running() -> None:
    started: list[float] = []
    finished = 0
    in_flight, most_in_flight = 0, 0
    stop_at = time.monotonic() + 0.3

    async def slow_round(began: float) -> None:
        nonlocal finished, in_flight, most_in_flight
        started.append(began)
        in_flight += 1
        most_in_flight = max(most_in_flight, in_flight)
        await asyncio.sleep(0.1)  # ten periods
        in_flight -= 1
        finished += 1

    skipped = await open_loop(slow_round, PERIOD_S, 100, lambda: time.monotonic() >= stop_at)
    assert skipped == []
    assert len(started) >= 20, "a closed loop would have started about 3 rounds"
    assert finished == len(started), "the rounds in flight are waited for"
    assert most_in_flight >= 3, "rounds overlap: none waits for the one before"


async def test_past_the_bound_a_round_is_skipped_and_its_start_told() -> None:
    release = asyncio.Event()
    stop_at = time.monotonic() + 0.2

    async def stuck_round(began: float) -> None:
        await release.wait()

    async def stop_then_release() -> None:
        await asyncio.sleep(0.25)
        release.set()

    releasing = asyncio.ensure_future(stop_then_release())
    skipped = await open_loop(stuck_round, PERIOD_S, 3, lambda: time.monotonic() >= stop_at)
    await releasing
    assert len(skipped) >= 10, "every start past the three in flight is skipped"
    assert skipped == sorted(skipped)
