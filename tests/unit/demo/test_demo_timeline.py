"""The demo's timeline: deliveries taken off the region readers in batches, each once, and
faults in seconds since the story began."""

from __future__ import annotations

import asyncio

import pytest

from demo import timeline as timeline_module
from demo.timeline import Timeline, sample_deliveries
from localcluster.tails import Received

pytestmark = pytest.mark.unit


def test_each_delivery_is_taken_once_with_its_lag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeline_module, "SAMPLE_S", 0)  # each look yields once to the test
    timeline = Timeline()
    received = {"us-east": Received("us-east"), "us-west": Received("us-west")}
    stop = asyncio.Event()

    async def story() -> None:
        sampler = asyncio.create_task(sample_deliveries(timeline, received, stop))
        await asyncio.sleep(0)  # the first look: nothing yet
        received["us-east"].latencies_s += [0.05, 0.07]
        await asyncio.sleep(0)
        received["us-east"].latencies_s.append(0.2)
        received["us-west"].latencies_s.append(12.5)
        stop.set()  # the last look takes what came since
        await sampler

    asyncio.run(story())
    east = timeline.delivered["us-east"]
    assert [round(lag_ms) for _, lag_ms in east] == [50, 70, 200]
    assert [round(lag_ms) for _, lag_ms in timeline.delivered["us-west"]] == [12500]
    assert all(0 <= seconds < 60 for seconds, _ in east)


def test_faults_are_in_seconds_since_the_story_began() -> None:
    timeline = Timeline(began=100.0)
    timeline.fault(104.0, 105.5, "owner killed")
    assert timeline.faults == [(4.0, 5.5, "owner killed")]
