"""Clocks and randomness as the running event loop provides them.

In production these are the operating system's (`time.monotonic`, `time.time`, an unseeded
`random.Random`). Under globelog's deterministic simulation (`verify/sim/loop.py`) the event
loop is the simulated world: it says so with `virtual_time = True`, and then its virtual time,
its virtual wall clock and its seeded random source stand in, so a seed replays the same run,
the times written into records included. Code of the drivers reads time and draws random
numbers through these functions (or a clock it was given), never the OS's directly.
"""

from __future__ import annotations

import asyncio
import random
import time


def _virtual() -> asyncio.AbstractEventLoop | None:
    loop = asyncio._get_running_loop()
    return loop if loop is not None and getattr(loop, "virtual_time", False) else None


def monotonic() -> float:
    """Seconds on a clock that never goes back."""
    loop = _virtual()
    return time.monotonic() if loop is None else loop.time()


def wall_s() -> float:
    """Seconds since the Unix epoch."""
    loop = _virtual()
    return time.time() if loop is None else loop.wall_time()  # type: ignore[attr-defined]


def wall_ms() -> int:
    """Milliseconds since the Unix epoch, as records and metadata store them."""
    return int(wall_s() * 1000)


def new_rng() -> random.Random:
    """A random source for jitter and choices: seeded from the simulation's when simulated."""
    loop = _virtual()
    if loop is None:
        return random.Random()
    return random.Random(loop.rng.getrandbits(64))  # type: ignore[attr-defined]
