"""A children watch whose node is deleted ends with the store's not-found error instead of
waiting for ever (kazoo's ChildrenWatch stops in silence then), so the follower that reads
it restarts or, for a stream's segment list, finds the stream gone.

The kazoo client is scripted at the MetaStore seam, its two watch recipes doing what kazoo
2.11's recipe/watchers.py does: ChildrenWatch calls its function with the children at once
and after each change, and on NoNodeError stops without calling it (also at the start);
DataWatch calls its function at once and after each change, with (None, None) while the
node is missing; a function that returns False stops either.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import pytest

from core.errors import NoNodeError, StreamNotFoundError
from global_meta import MetaStore
from global_meta.streams import StreamMetaStore

pytestmark = pytest.mark.unit
GUARD_S = 10.0  # bounds a wait that a bug would make endless; never reached when it passes


@dataclass
class Stat:
    czxid: int


class ScriptedKazoo:
    connected = True

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[int, list[str]]] = {}  # path -> (czxid, children)
        self.zxid = 0
        self.children_watches: dict[str, list[Callable[[list[str]], Any]]] = {}
        self.data_watches: dict[str, list[Callable[..., Any]]] = {}

    def add_listener(self, listener: Callable[[Any], None]) -> None:
        pass

    def make(self, path: str, children: list[str]) -> None:
        self.zxid += 1
        self.nodes[path] = (self.zxid, children)
        self._data_changed(path)

    def set_children(self, path: str, children: list[str]) -> None:
        self.nodes[path] = (self.nodes[path][0], children)
        for func in list(self.children_watches.get(path, [])):
            self._call_children(path, func)

    def delete(self, path: str) -> None:
        del self.nodes[path]
        self.children_watches.pop(path, None)  # NoNodeError in the recipe: stopped, not called
        self._data_changed(path)

    def ChildrenWatch(self, path: str, func: Callable[[list[str]], Any]) -> None:  # noqa: N802
        if path not in self.nodes:
            return  # kazoo 2.11: NoNodeError at its first read stops it without a call
        self.children_watches.setdefault(path, []).append(func)
        self._call_children(path, func)

    def DataWatch(self, path: str, func: Callable[..., Any]) -> None:  # noqa: N802
        self.data_watches.setdefault(path, []).append(func)
        self._call_data(path, func)

    def _call_children(self, path: str, func: Callable[[list[str]], Any]) -> None:
        if func(list(self.nodes[path][1])) is False:
            self.children_watches[path].remove(func)

    def _data_changed(self, path: str) -> None:
        for func in list(self.data_watches.get(path, [])):
            self._call_data(path, func)

    def _call_data(self, path: str, func: Callable[..., Any]) -> None:
        node = self.nodes.get(path)
        stat = None if node is None else Stat(node[0])
        if func(None if node is None else b"", stat, None) is False:
            self.data_watches[path].remove(func)


def store_of(kazoo: ScriptedKazoo) -> MetaStore:
    return MetaStore(cast(Any, kazoo), asyncio.get_running_loop(), op_timeout_s=5.0)


async def test_a_watch_whose_node_is_deleted_ends_with_no_node() -> None:
    kazoo = ScriptedKazoo()
    kazoo.make("/drain/us-east", ["a"])
    store = store_of(kazoo)
    async with contextlib.aclosing(store.watch_children("/drain/us-east")) as watch:
        assert await anext(watch) == ["a"]
        kazoo.set_children("/drain/us-east", ["a", "b"])
        assert await anext(watch) == ["a", "b"]
        kazoo.delete("/drain/us-east")
        with pytest.raises(NoNodeError, match="/drain/us-east"):
            async with asyncio.timeout(GUARD_S):
                await anext(watch)
    assert kazoo.data_watches["/drain/us-east"] == [], "its data watch stopped too"


async def test_a_watch_of_a_missing_node_ends_at_once() -> None:
    store = store_of(ScriptedKazoo())
    with pytest.raises(NoNodeError, match="/nowhere"):
        async with asyncio.timeout(GUARD_S):
            await anext(store.watch_children("/nowhere"))


async def test_a_node_deleted_and_made_again_between_two_reads_ends_the_watch_too() -> None:
    """Its new children watch was never set (kazoo's stopped with the old node)."""
    kazoo = ScriptedKazoo()
    kazoo.make("/proxies/us-east/write", ["w1"])
    store = store_of(kazoo)
    async with contextlib.aclosing(store.watch_children("/proxies/us-east/write")) as watch:
        assert await anext(watch) == ["w1"]
        kazoo.delete("/proxies/us-east/write")
        kazoo.make("/proxies/us-east/write", [])
        with pytest.raises(NoNodeError):
            async with asyncio.timeout(GUARD_S):
                await anext(watch)


async def test_a_stream_deleted_while_its_segments_are_watched_is_not_found() -> None:
    """A reader waiting for its next segment learns the stream is gone (its cache ends)."""
    kazoo = ScriptedKazoo()
    streams = StreamMetaStore(store_of(kazoo), "ns")
    segments = f"{streams.path('orders')}/segments"
    kazoo.make(segments, ["000000000000000001"])
    async with contextlib.aclosing(streams.watch_segments("orders")) as watch:
        assert await anext(watch) == ["000000000000000001"]
        kazoo.delete(segments)
        with pytest.raises(StreamNotFoundError, match="'orders' does not exist"):
            async with asyncio.timeout(GUARD_S):
                await anext(watch)
