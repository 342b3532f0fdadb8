"""The event loop of globelog's commands: uvloop (libuv), as in the proxies."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


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
