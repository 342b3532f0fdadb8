"""A Spark worker's loop (pipeline/worker_loop.py): a task's thread steps its batches on the
worker's event loop; a finished task leaves the session for the next, a failed one drops it,
and either way the task's iterator is closed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pipeline.worker_loop import WorkerLoop

pytestmark = pytest.mark.unit


class Source:
    """An async iterator of 0..n-1 that records whether it was closed, and on which thread."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.closed = False
        self.threads: set[str] = set()

    async def items(self) -> AsyncIterator[int]:
        try:
            for i in range(self.n):
                await asyncio.sleep(0)
                self.threads.add(threading.current_thread().name)
                yield i
        finally:
            self.closed = True


def test_a_task_thread_steps_the_loop_and_a_failed_task_drops_its_session() -> None:
    loop = WorkerLoop()
    key = ("topology.yaml", "us-east", "default")
    closed = threading.Event()

    class Stack:
        async def aclose(self) -> None:
            closed.set()

    loop._sessions[key] = (Stack(), "session")  # type: ignore[assignment]
    sources: list[Source] = []

    def make(session: Any) -> AsyncIterator[int]:
        assert session == "session"
        sources.append(Source(3))
        return sources[-1].items()

    assert list(loop.iterate(key, make)) == [0, 1, 2]
    assert sources[0].closed and sources[0].threads == {"globelog-worker-loop"}
    assert key in loop._sessions and not closed.is_set()  # kept for the next task
    with pytest.raises(RuntimeError, match="spark gave up"):
        for _ in loop.iterate(key, make):
            raise RuntimeError("spark gave up")
    assert closed.is_set() and key not in loop._sessions
    assert sources[1].closed
