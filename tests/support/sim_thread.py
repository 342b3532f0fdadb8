"""A simulation's loop driven from a test's own event loop: each call runs to its end on the
simulation's loop, in a thread of its own (one loop may not run inside another), so one set
of contract cases can await a real component and a simulated one alike."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
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


def under_hash_seeds(script: str, *args: str, hash_seeds: tuple[int, ...] = (1, 2)) -> list[str]:
    """What `script` prints in a new process under each hash seed (other set and dict orders
    of strings): a seed that replays prints the same every time."""
    return [
        subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(hash_seed)},
        ).stdout
        for hash_seed in hash_seeds
    ]
