"""Work an owner runs beside its callers and past their end: clean-ups whose outcome no caller
waits for (an id node's delete, a ledger made for nothing). Each is kept until it is done, its
failure is logged with what it was, and the owner's close waits for what is left, up to a
bound, then cancels it (I8)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Background:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def run(self, work: Coroutine[Any, Any, None], what: str) -> None:
        """Starts `work` (`what` it is, for the log)."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)

        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.error("%s failed", what, exc_info=task.exception())

        task.add_done_callback(done)

    async def close(self, timeout_s: float) -> None:
        """Waits up to `timeout_s` for what is under way, then cancels what is left."""
        if not self._tasks:
            return
        _, late = await asyncio.wait(set(self._tasks), timeout=timeout_s)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)
