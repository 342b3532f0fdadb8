"""The event loop of globelog's commands: uvloop (libuv), as in the proxies."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")
log = logging.getLogger(__name__)
GC_PAUSE_WARN_S = 0.05  # a collection that stopped the loop this long is logged


def run(main: Coroutine[Any, Any, T]) -> T:
    """Runs `main` to its end on a new uvloop event loop (asyncio.run's contract)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def freeze_startup_heap() -> None:
    """Leaves what a server made while starting (modules, topology, clients: tens of thousands
    of objects that live as long as the process) out of the cyclic garbage collector's walks.
    Its full collections walk every tracked object; under load a read proxy's took 50-110 ms
    (the loop stopped for each), a third to a half of them spent on objects that never die.
    Frozen objects are still freed by reference counting; only a cycle among them would stay."""
    gc.collect()
    gc.freeze()


def time_collections(record: Callable[[float, int], None]) -> Callable[[str, dict[str, int]], None]:
    """Times each of the cyclic garbage collector's collections (the event loop stops for
    each): `record(seconds, generation)`, and a warning for one of GC_PAUSE_WARN_S or more.
    The callback is installed in `gc.callbacks` and returned (to be removed with it)."""
    began: list[float] = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
            return
        seconds = time.perf_counter() - began[0]
        generation = info["generation"]
        record(seconds, generation)
        if seconds >= GC_PAUSE_WARN_S:
            log.warning(
                "a generation-%d garbage collection stopped the loop for %.0f ms "
                "(%d objects collected)", generation, seconds * 1000, info["collected"],
            )  # fmt: skip

    gc.callbacks.append(callback)
    return callback
