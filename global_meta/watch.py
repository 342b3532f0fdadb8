"""A one-slot, coalescing mailbox that carries watch values from kazoo's thread to asyncio."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Generic, TypeVar

T = TypeVar("T")
_EMPTY = object()


class Mailbox(Generic[T]):
    """Holds only the latest value: watches describe state, so older values are stale.

    `put_threadsafe` returns False once the consumer has gone, which tells kazoo's watch
    recipes to stop re-registering the watch. `fail_threadsafe` ends the consumer's iteration
    with an error (the watched node is gone): it wins over a value not yet taken.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._value: object = _EMPTY
        self._ready = asyncio.Event()
        self._closed = False
        self._error: Exception | None = None

    def put_threadsafe(self, value: T) -> bool:
        if self._closed:
            return False
        try:
            self._loop.call_soon_threadsafe(self._put, value)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self._closed = True
            return False
        return True

    @property
    def listening(self) -> bool:
        """False once the consumer has gone (or the mailbox failed): a recipe may stop."""
        return not self._closed and self._error is None

    def fail_threadsafe(self, error: Exception) -> bool:
        if self._closed:
            return False
        try:
            self._loop.call_soon_threadsafe(self._fail, error)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self._closed = True
        return False  # nothing more to deliver after it

    def close(self) -> None:
        """No consumer will come (its watch failed to start): the recipe may stop."""
        self._closed = True

    def _put(self, value: T) -> None:
        self._value = value
        self._ready.set()

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        self._ready.set()

    async def __aiter__(self) -> AsyncIterator[T]:
        try:
            while True:
                await self._ready.wait()
                self._ready.clear()
                if self._error is not None:
                    raise self._error
                value = self._value
                self._value = _EMPTY
                if value is not _EMPTY:
                    yield value  # type: ignore[misc]
        finally:
            self._closed = True
