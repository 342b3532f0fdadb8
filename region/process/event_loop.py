"""The event loop of globelog's commands: uvloop (libuv), as in the proxies."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")

log = logging.getLogger(__name__)

FREEZE_EVERY_S = 60.0  # how often a server moves what survived out of the collector's walks
FREEZE_AFTER_FULL_S = 10.0  # and after a full collection, if none was frozen this recently
THAW_EVERY_S = 900.0  # how often it puts everything back and collects it all once
# Young collections between two full ones the collector may start of itself (CPython's
# default: 10). A server collects in full every FREEZE_EVERY_S anyway (`freeze_heap`); left at
# 10, a read proxy serving hundreds of tails ran a full one every 2-4 s, each walking all
# that survived since the last freeze (53-157 ms, the loop stopped).
FULL_AFTER_YOUNG = 100
BACKGROUND_STOP_S = 5.0  # a server's background tasks end within this of their cancellation


def run(main: Coroutine[Any, Any, T]) -> T:
    """Runs `main` to its end on a new uvloop event loop (asyncio.run's contract)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def freeze_heap() -> None:
    """Collects what the collector walks, then leaves what survived out of its walks: once
    a server has started (modules, topology, clients: tens of thousands of objects that live as
    long as the process), and then every minute (`keep_survivors_frozen`). Its full collections
    walk every tracked object; under load a read proxy's took 50-110 ms (the loop stopped for
    each), a third to a half of them spent on objects that never die. Frozen objects are still
    freed by reference counting; only a cycle among them stays until a thaw."""
    gc.collect()
    gc.freeze()


async def keep_survivors_frozen(
    every_s: float = FREEZE_EVERY_S, thaw_every_s: float = THAW_EVERY_S
) -> None:
    """Until cancelled: every `every_s`, collects what is not frozen yet and freezes what
    survived; after a full collection the collector makes of itself, freezes what survived it
    (at most once every FREEZE_AFTER_FULL_S); every `thaw_every_s`, unfreezes it all and
    collects it once. Meanwhile the collector starts a full collection of itself only after
    FULL_AFTER_YOUNG middle ones: the scheduled ones do most of that work, a cycle's garbage
    waits at most `every_s` for one, and the loop stops for a full walk ten times less often.

    A full collection walks every object the collector tracks, and the loop stops for it. A
    server's heap grows with what it keeps (a write proxy's owned streams: writers, ledgers,
    producer tables; a read proxy's read-aheads: records by the hundred thousand), and the
    objects that outlive a few young collections (a request waiting on a WAN round trip, say)
    bring a full collection on every minute or so under load: 50-180 ms each on a write proxy
    owning 1 500 streams, for a few hundred objects found. Frozen, the objects that were
    already there are out of those walks, which cover only what came since the last freeze;
    the collection before each freeze walks only that too, and keeps dead cycles (a failed
    request's frames and the body they hold) from being frozen with the rest. A read proxy
    filling read-aheads still ran full collections of 53-74 ms several times a minute between
    the minute's freezes, each walking what the minute had brought: frozen soon after such a
    collection has found them alive, survivors are walked once or twice, not at every full
    collection until the minute's end. (What a full collection leaves is what it found alive,
    and what its finalizers made meanwhile, which is frozen unexamined.)

    A frozen object is still freed by reference counting when its last reference goes; a cycle
    among frozen objects, and what only it holds, waits for the next thaw: the one full
    collection of the whole heap, which bounds what such cycles can hold meanwhile. Each
    freeze keeps the cycles of the requests in flight at that moment (a failed request's
    frames) until the thaw, so freezes are at most one every FREEZE_AFTER_FULL_S: at most 90
    moments' worth of them between two thaws."""
    loop = asyncio.get_running_loop()
    thaw_at = loop.time() + thaw_every_s
    frozen_at = time.monotonic()  # freeze_heap ran at the server's start

    def after_full_collection(phase: str, info: dict[str, int]) -> None:
        nonlocal frozen_at
        now = time.monotonic()  # any thread's collection: not the loop's clock
        if phase == "stop" and info["generation"] == 2 and now - frozen_at >= FREEZE_AFTER_FULL_S:
            gc.freeze()
            frozen_at = now

    gc.callbacks.append(after_full_collection)
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], FULL_AFTER_YOUNG)
    try:
        while True:
            await asyncio.sleep(every_s)
            if loop.time() >= thaw_at:
                gc.unfreeze()  # the collection below walks the whole heap, this once
                thaw_at = loop.time() + thaw_every_s
            freeze_heap()
            frozen_at = time.monotonic()
    finally:
        gc.callbacks.remove(after_full_collection)
        gc.set_threshold(*thresholds)


def start_background(*work: Coroutine[Any, Any, None]) -> list[asyncio.Task[None]]:
    """A server's background work as tasks, each of which that ends by an error says so at
    once (not only when the server stops); the caller cancels them at its stop."""
    tasks = [asyncio.get_running_loop().create_task(coroutine) for coroutine in work]
    for task in tasks:
        task.add_done_callback(_log_failure)
    return tasks


async def stop_background(
    tasks: list[asyncio.Task[None]], timeout_s: float = BACKGROUND_STOP_S
) -> None:
    """Cancels `start_background`'s tasks and waits up to `timeout_s` for them to end (their
    own clean-up: a bookie watch's questions, for one), saying which did not."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    _, left = await asyncio.wait(tasks, timeout=timeout_s)
    for task in left:
        log.warning("background task %s did not end within %g s of its stop", task, timeout_s)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (err := task.exception()) is not None:
        log.error("background task %s failed: %r", task.get_coro(), err)
