"""A read whose connection was dropped (a move home, a node that stopped serving) is asked once
more; a write is not (it may have landed), and a read that loses its connection twice fails."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from core import errors
from global_meta import MetaStore

pytestmark = pytest.mark.unit


class _Settled:
    """A kazoo async result, already settled with a value or an exception."""

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error

    def rawlink(self, callback: Callable[[Any], None]) -> None:
        callback(self)

    def get_nowait(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class _Client:
    """The first `losses` calls lose their connection."""

    def __init__(self, losses: int = 1) -> None:
        self.losses, self.calls = losses, 0

    def add_listener(self, listener: Callable[[Any], None]) -> None:
        pass

    def _answer(self, value: Any) -> _Settled:
        self.calls += 1
        if self.calls <= self.losses:
            return _Settled(error=ConnectionLoss())
        return _Settled(value)

    def get_children_async(self, path: str) -> _Settled:
        return self._answer(["a"])

    def create_async(self, path: str, *_: Any, **__: Any) -> _Settled:
        return self._answer(path)


def store(client: _Client) -> MetaStore:
    return MetaStore(client, asyncio.get_running_loop(), op_timeout_s=5.0)  # type: ignore[arg-type]


async def test_a_read_whose_connection_was_dropped_is_asked_again() -> None:
    client = _Client()
    assert await store(client).children("/x") == ["a"]
    assert client.calls == 2


async def test_a_write_whose_connection_was_dropped_fails_as_it_may_have_landed() -> None:
    client = _Client()
    with pytest.raises(errors.MetadataUnavailableError, match="connection to ZooKeeper lost"):
        await store(client).create("/x/y")
    assert client.calls == 1


async def test_a_read_is_asked_once_more_only() -> None:
    client = _Client(losses=2)
    with pytest.raises(errors.MetadataUnavailableError, match="connection to ZooKeeper lost"):
        await store(client).children("/x")
    assert client.calls == 2
