"""The demo's picture: what the story did over time (writes acknowledged, records delivered to
each region and their delivery lag, the owner kill and the region outage), recorded while it
runs and drawn as one PNG."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from figures.plots import story_timeline
from localcluster.tails import Received

# Deliveries are read off the region readers in batches this often: the picture's resolution
# of when a record arrived, and a bound on the work per region per step.
SAMPLE_S = 0.25


@dataclass
class Timeline:
    """Seconds since the story began (`began`, time.monotonic()) of every event it shows."""

    began: float = field(default_factory=time.monotonic)
    acked_s: list[float] = field(default_factory=list)
    delivered: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # (s, lag ms)
    faults: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, what)

    def at(self, monotonic: float) -> float:
        return monotonic - self.began

    def fault(self, start: float, end: float, what: str) -> None:
        """A fault from `start` to `end` (time.monotonic()), labelled `what` in the picture."""
        self.faults.append((self.at(start), self.at(end), what))


async def sample_deliveries(
    timeline: Timeline, received: dict[str, Received], stop: asyncio.Event
) -> None:
    """Every SAMPLE_S, takes the records each region's reader got since the last look, with
    their delivery lags; a last look once `stop` is set."""
    seen = dict.fromkeys(received, 0)
    while True:
        now = timeline.at(time.monotonic())
        for region, reader in received.items():
            new = reader.latencies_s[seen[region] :]
            seen[region] += len(new)
            timeline.delivered.setdefault(region, []).extend((now, s * 1000) for s in new)
        if stop.is_set():
            return
        await asyncio.sleep(SAMPLE_S)


def draw(timeline: Timeline, path: Path, stream: str, writer_region: str) -> Path:
    return story_timeline(
        path,
        f"make demo: stream {stream!r} written from {writer_region}, read in every region "
        "through its read proxy",
        timeline.acked_s,
        timeline.delivered,
        timeline.faults,
    )
