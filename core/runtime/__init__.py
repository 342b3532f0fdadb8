"""Clocks and randomness as the running event loop provides them.

In production these are the operating system's (`time.monotonic`, `time.time`, an unseeded
`random.Random`). Under globelog's deterministic simulation (`verify/sim/io/loop.py`) the event
loop is the simulated world: it says so with `virtual_time = True`, and then its virtual time,
its virtual wall clock and its seeded random source stand in, so a seed replays the same run,
the times written into records included. Code of the drivers reads time and draws random
numbers through these functions (or a clock it was given), never the OS's directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Iterator


def _virtual() -> asyncio.AbstractEventLoop | None:
    loop = asyncio._get_running_loop()
    return loop if loop is not None and getattr(loop, "virtual_time", False) else None


def monotonic() -> float:
    """Seconds on a clock that never goes back."""
    loop = _virtual()
    return time.monotonic() if loop is None else loop.time()


def clock() -> Callable[[], float]:
    """The monotonic clock for an object to keep (resolved once, off its hot path): the
    running loop's virtual one under the simulation, `time.monotonic` otherwise."""
    loop = _virtual()
    return time.monotonic if loop is None else loop.time


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


# -- faults the simulation switches on in the real code paths --------------------------------
# Each names a guarantee a simulation must see broken when the code skips it (the suite checks
# the simulation finds each within a stated number of seeds). None is ever on in production:
# only `breaking()`, which the simulation calls, turns one on, for one run.
ACK_AT_ONE_COPY = "ack-at-one-copy"  # a ledger add completes on its first bookie's ack
SKIP_FENCING = "skip-fencing"  # recovery reads the last entries without fencing the bookies
IGNORE_REGIONS = "ignore-regions"  # placement fills an ensemble from the writer's region first
FORGET_PRODUCERS = "forget-producers"  # a new owner starts with an empty producer table
FAULTS = (ACK_AT_ONE_COPY, SKIP_FENCING, IGNORE_REGIONS, FORGET_PRODUCERS)

_broken: set[str] = set()


def broken(fault: str) -> bool:
    """Whether the simulation switched `fault` on (never, outside a simulation's run)."""
    return fault in _broken


@contextlib.contextmanager
def breaking(*faults: str) -> Iterator[None]:
    """`faults` switched on for the duration (a simulation's broken run)."""
    unknown = set(faults) - set(FAULTS)
    assert not unknown, f"unknown faults {sorted(unknown)}; expected some of {FAULTS}"
    before = set(_broken)
    _broken.update(faults)
    try:
        yield
    finally:
        _broken.clear()
        _broken.update(before)
