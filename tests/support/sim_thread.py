"""A simulation's loop driven from a test's own event loop: each call runs to its end on the
simulation's loop, in a thread of its own (one loop may not run inside another), so one set
of contract cases can await a real component and a simulated one alike."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from verify.sim.io.loop import Host, SimLoop

T = TypeVar("T")


class SimThread:
    def __init__(self, loop: SimLoop) -> None:
        self.loop = loop
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="simulation")

    async def call(self, host: Host, make: Callable[[], Awaitable[T]]) -> T:
        """`make()`'s result, awaited as code of `host` in the simulation."""
        return await asyncio.wrap_future(self._thread.submit(self._run, host, make))

    def _run(self, host: Host, make: Callable[[], Awaitable[T]]) -> T:
        async def call() -> T:
            return await make()

        return self.loop.run_until_complete(self.loop.spawn(host, call()))

    def close(self) -> None:
        self._thread.submit(self.loop.close).result()
        self._thread.shutdown()
