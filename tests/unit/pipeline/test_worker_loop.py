"""A Spark worker's loop (pipeline/worker_loop.py): a task's thread steps its batches on the
worker's event loop; a finished task leaves the session for the next, a failed one drops it,
and either way the task's iterator is closed."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from localcluster.probes import wait_until
from pipeline import worker_loop
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


def test_the_first_session_freezes_the_heap_once_for_the_workers_life(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: list[tuple[str, str]] = []

    @contextlib.asynccontextmanager
    async def session(topology: Any, region: str, namespace: str) -> AsyncIterator[str]:
        opened.append((region, namespace))
        yield f"session {region}"

    monkeypatch.setattr(worker_loop, "load_topology", lambda path: path)
    monkeypatch.setattr(worker_loop, "read_session", session)
    freezes: list[int] = []
    real_freeze = gc.freeze
    # Counted by call: the frozen count itself falls as reference counting frees frozen objects.
    monkeypatch.setattr(gc, "freeze", lambda: (freezes.append(1), real_freeze())[1])
    try:
        loop = WorkerLoop()
        make = lambda s: Source(2).items()  # noqa: E731
        assert list(loop.iterate(("t.yaml", "us-east", "default"), make)) == [0, 1]
        assert len(freezes) == 1  # the worker's objects are out of the collector's way
        assert gc.get_freeze_count() > 0
        assert list(loop.iterate(("t.yaml", "eu-west", "default"), make)) == [0, 1]
        assert len(freezes) == 1  # a second session does not freeze again
        assert opened == [("us-east", "default"), ("eu-west", "default")]
    finally:
        gc.unfreeze()


def test_work_on_a_broken_held_session_runs_once_more_on_a_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: list[int] = []
    closed: list[str] = []

    @contextlib.asynccontextmanager
    async def session(topology: Any, region: str, namespace: str) -> AsyncIterator[str]:
        opened.append(len(opened))
        name = f"session {len(opened)}"
        try:
            yield name
        finally:
            closed.append(name)

    monkeypatch.setattr(worker_loop, "load_topology", lambda path: path)
    monkeypatch.setattr(worker_loop, "read_session", session)
    monkeypatch.setattr(worker_loop, "_freeze_heap", lambda: None)
    loop = WorkerLoop()
    key = ("t.yaml", "us-east", "default")

    async def plan(s: Any) -> str:
        return f"planned on {s}"

    assert loop.call(key, plan) == "planned on session 1"
    assert loop.call(key, plan) == "planned on session 1"  # held: no new connection
    assert len(opened) == 1

    async def broken_once(s: Any) -> str:
        if s == "session 1":
            raise ConnectionError("ZooKeeper session expired")
        return f"planned on {s}"

    assert loop.call(key, broken_once) == "planned on session 2"
    assert closed == ["session 1"]  # the broken one, dropped
    assert len(opened) == 2

    async def always_broken(s: Any) -> str:
        raise LookupError(f"stream 'x' does not exist ({s})")

    with pytest.raises(LookupError, match="session 3"):  # tried on the held one, then anew
        loop.call(key, always_broken)
    assert len(opened) == 3 and key not in loop._sessions
    with pytest.raises(LookupError, match="session 4"):  # a new session's failure: no retry
        loop.call(key, always_broken)
    assert len(opened) == 4


def test_calls_at_once_share_one_new_session(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []

    @contextlib.asynccontextmanager
    async def session(topology: Any, region: str, namespace: str) -> AsyncIterator[str]:
        opened.append(region)

        async def all_called() -> bool:  # each call is a task on the worker's loop
            return len(asyncio.all_tasks()) >= len(threads)

        await wait_until("every call waiting for the session", all_called, 5)  # connecting
        yield "session"

    monkeypatch.setattr(worker_loop, "load_topology", lambda path: path)
    monkeypatch.setattr(worker_loop, "read_session", session)
    monkeypatch.setattr(worker_loop, "_freeze_heap", lambda: None)
    loop = WorkerLoop()
    key = ("t.yaml", "us-east", "default")
    answers: list[str] = []

    async def plan(s: Any) -> str:
        return f"planned on {s}"

    threads = [
        threading.Thread(target=lambda: answers.append(loop.call(key, plan))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert answers == ["planned on session"] * 3 and opened == ["us-east"]
