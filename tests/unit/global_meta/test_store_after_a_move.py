"""A read whose connection a move home dropped is asked once more; a write is not (it may have
landed), and a read that lost its connection for any other reason is not either."""

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


class _Homing:
    moves = 0

    def start(self) -> None:
        pass


class _Client:
    """Each call's first attempt loses its connection to a move home (when `moving`)."""

    def __init__(self, homing: _Homing, moving: bool = True) -> None:
        self.homing, self.moving, self.calls = homing, moving, 0

    def add_listener(self, listener: Callable[[Any], None]) -> None:
        pass

    def _answer(self, value: Any) -> _Settled:
        self.calls += 1
        if self.calls == 1:
            if self.moving:
                self.homing.moves += 1
            return _Settled(error=ConnectionLoss())
        return _Settled(value)

    def get_children_async(self, path: str) -> _Settled:
        return self._answer(["a"])

    def create_async(self, path: str, *_: Any, **__: Any) -> _Settled:
        return self._answer(path)


def store(client: _Client, homing: _Homing) -> MetaStore:
    return MetaStore(client, asyncio.get_running_loop(), op_timeout_s=5.0, homing=homing)  # type: ignore[arg-type]


async def test_a_read_that_a_move_home_dropped_is_asked_again() -> None:
    homing = _Homing()
    client = _Client(homing)
    assert await store(client, homing).children("/x") == ["a"]
    assert client.calls == 2


async def test_a_write_that_a_move_home_dropped_fails_as_any_lost_connection() -> None:
    homing = _Homing()
    client = _Client(homing)
    with pytest.raises(errors.MetadataUnavailableError, match="connection to ZooKeeper lost"):
        await store(client, homing).create("/x/y")
    assert client.calls == 1


async def test_a_read_that_lost_its_connection_otherwise_fails() -> None:
    homing = _Homing()
    client = _Client(homing, moving=False)
    with pytest.raises(errors.MetadataUnavailableError, match="connection to ZooKeeper lost"):
        await store(client, homing).children("/x")
    assert client.calls == 1
