"""A MetaStore operation cancelled just as its result arrives still ends its caller.

Python 3.11's `asyncio.wait_for` returns the result and drops such a cancellation, so a task
cancelled at that moment runs on; a close() that awaits it then waits forever (I8).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from global_meta import MetaStore

pytestmark = pytest.mark.unit


class _Done:
    """Stands for a kazoo async result that is already settled."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def rawlink(self, callback: Callable[[Any], None]) -> None:
        callback(self)

    def get_nowait(self) -> Any:
        return self.value


class _Client:
    def add_listener(self, listener: Callable[[Any], None]) -> None:
        pass

    def get_children_async(self, path: str) -> _Done:
        return _Done(["a", "b"])


async def test_a_cancellation_racing_with_the_result_is_not_lost() -> None:
    store = MetaStore(_Client(), asyncio.get_running_loop(), op_timeout_s=5.0)  # type: ignore[arg-type]
    for _ in range(20):
        caller = asyncio.create_task(store.children("/x"))
        await asyncio.sleep(0)  # the caller now waits; its result is queued to arrive next
        await asyncio.sleep(0)  # the result has arrived; the caller has not resumed yet
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
