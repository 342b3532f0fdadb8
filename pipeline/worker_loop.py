"""One event loop and one read session per Spark Python worker process, shared by its tasks.

Spark calls a data source's `read()` synchronously, once per input partition, in long-lived
Python worker processes, and plans each query (`partitions()`, a streaming query's offsets) in
another long-lived one. Connecting to ZooKeeper and the bookies costs ~100 ms, as much as
reading a whole partition of small records, so a worker keeps its connections: an event loop
runs in a daemon thread, sessions are opened on it once per (topology, region, namespace),
and each task's async iterator (or the planner's call) is stepped from the caller's thread.
Work that fails drops the session it used (the next connects afresh), so a broken connection
is never reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

from core.topology_loader import load_topology
from reader.session import ReadSession, read_session

T = TypeVar("T")
SessionKey = tuple[str, str, str]  # topology path, region, namespace


class WorkerLoop:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="globelog-worker-loop", daemon=True
        )
        self._thread.start()
        self._sessions: dict[SessionKey, tuple[contextlib.AsyncExitStack, ReadSession]] = {}
        self._opening: dict[SessionKey, asyncio.Lock] = {}
        self._frozen = False

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _session(self, key: SessionKey) -> ReadSession:
        """The session held for `key`, opened if there is none (one opening at a time)."""
        async with self._opening.setdefault(key, asyncio.Lock()):
            if key not in self._sessions:
                stack = contextlib.AsyncExitStack()
                topology = load_topology(key[0])
                session = await stack.enter_async_context(read_session(topology, key[1], key[2]))
                self._sessions[key] = (stack, session)
                if not self._frozen:
                    self._frozen = True
                    _freeze_heap()
            return self._sessions[key][1]

    async def _drop(self, key: SessionKey, session: ReadSession) -> None:
        """Closes `session` if it is still the one held for `key` (not a newer one)."""
        held = self._sessions.get(key)
        if held is not None and held[1] is session:
            del self._sessions[key]
            with contextlib.suppress(Exception):
                await held[0].aclose()

    def call(self, key: SessionKey, work: Callable[[ReadSession], Awaitable[T]]) -> T:
        """`work(session)` on the loop, waited for from this thread: read-only work such as
        the driver's planning. A session held from before may have broken since (its
        ZooKeeper session expired, a bookie restarted): when work on it fails, the session is
        dropped and the work runs once more on a new one, whose failure is the answer."""
        for attempt in range(2):
            held = key in self._sessions
            session: ReadSession = self._run(self._session(key))
            try:
                result: T = self._run(_awaited(work(session)))
                return result
            except Exception:
                self._run(self._drop(key, session))
                if attempt == 1 or not held:
                    raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    def iterate(
        self, key: SessionKey, make: Callable[[ReadSession], AsyncIterator[T]]
    ) -> Iterator[T]:
        """The items of `make(session)`, stepped on the worker's loop from this thread."""

        async def start() -> tuple[ReadSession, AsyncIterator[T]]:
            session = await self._session(key)
            return session, make(session)

        session, items = self._run(start())
        try:
            while True:
                try:
                    yield self._run(_anext(items))
                except StopAsyncIteration:
                    return
        except BaseException:
            self._run(self._drop(key, session))
            raise
        finally:
            with contextlib.suppress(Exception):
                self._run(_aclose(items))


def _freeze_heap() -> None:
    """Spark's Python daemon runs a full garbage collection after every task of a reused
    worker, which walks every object the worker holds: pyspark's, pyarrow's, numpy's and
    globelog's modules and its read session (9 % of a worker's wall time in a batch read of
    100-byte records, 2 % after this). Once the first session is open, what the worker holds
    for its life is moved out of the collector's sight (gc.freeze), so each collection walks
    only what tasks made since. Reference counting still frees frozen objects; only cyclic
    garbage made before the freeze (at most that one session's, if a failed task drops it)
    is never collected."""
    gc.collect()
    gc.freeze()


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def _anext(items: AsyncIterator[T]) -> T:
    return await anext(items)


async def _aclose(items: AsyncIterator[Any]) -> None:
    close = getattr(items, "aclose", None)
    if close is not None:
        await close()


@functools.cache
def worker_loop() -> WorkerLoop:
    """This process's worker loop, started on first use."""
    return WorkerLoop()
