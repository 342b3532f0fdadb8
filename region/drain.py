"""Draining: an operator tells one region's write proxies to stop taking a stream's writes.

    /globelog/drain/<region>/<namespace>~<stream>     one znode per drained stream
    /globelog/drain/<region>/whole-region              every stream (a region's removal)

A region's proxies watch their region's folder: a drained stream they own is released (its
segment completed, its lock freed) and its requests are redirected to a write proxy of
another region, which takes the stream. Removing the znode ends the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from core.errors import NodeExistsError, NoNodeError
from global_meta import MetaSession
from global_meta.followers import Follower, FollowerStatus
from region.registry import ROOT as PROXIES_ROOT
from region.registry import proxy_path

ROOT = "/globelog/drain"
SEPARATOR = "~"  # never in a namespace or stream name
WHOLE_REGION = "whole-region"  # no SEPARATOR: never a stream's znode
log = logging.getLogger(__name__)


def drain_path(region: str, namespace: str = "", stream: str = "") -> str:
    base = f"{ROOT}/{region}"
    return f"{base}/{namespace}{SEPARATOR}{stream}" if stream else base


async def set_region_drained(store: MetaSession, region: str, drained: bool) -> bool:
    """Drains (or undrains) every stream in `region`; False when it already was (or was not)."""
    return await _mark(store, f"{drain_path(region)}/{WHOLE_REGION}", drained)


async def _mark(store: MetaSession, path: str, present: bool) -> bool:
    """Creates (or deletes) the marker znode at `path`; False when it already was (or was not)."""
    try:
        if present:
            await store.create(path, b"", make_parents=True)
        else:
            await store.delete(path, version=-1)
    except (NodeExistsError, NoNodeError):
        return False
    return True


async def region_drained(store: MetaSession, region: str) -> bool:
    return await store.exists(f"{drain_path(region)}/{WHOLE_REGION}") is not None


async def drain_targets(store: MetaSession, region: str) -> list[str]:
    """The regions a stream drained in `region` can go to: another region with a write
    proxy registered and not wholly drained itself. None: a drain would leave its writers
    nowhere to go (`globelog stream drain` refuses unless forced)."""
    try:
        regions = await store.children(PROXIES_ROOT)
    except NoNodeError:
        return []
    found = []
    for other in sorted(set(regions) - {region}):
        try:
            proxies = await store.children(proxy_path(other, "write"))
        except NoNodeError:
            continue
        if proxies and not await region_drained(store, other):
            found.append(other)
    return found


async def set_drained(
    store: MetaSession, region: str, namespace: str, stream: str, drained: bool
) -> bool:
    """Drains (or undrains) the stream in `region`; False when it already was (or was not)."""
    return await _mark(store, drain_path(region, namespace, stream), drained)


class DrainWatch:
    """The drained streams of one region, kept current by a supervised ZooKeeper watch."""

    def __init__(
        self,
        store: MetaSession,
        region: str,
        on_failed: Callable[[FollowerStatus], None] | None = None,
    ) -> None:
        self._store = store
        self.region = region
        self.drained: frozenset[tuple[str, str]] = frozenset()
        self.whole_region = False  # every stream of the region drained
        self.changed = asyncio.Event()
        self._follower = Follower(f"drained streams of {region}", self._follow, on_failed=on_failed)

    async def start(self) -> None:
        await self._store.ensure_path(drain_path(self.region))
        self._follower.start()

    def status(self) -> FollowerStatus:
        return self._follower.status()

    async def _follow(self, following: Callable[[], None]) -> None:
        async with contextlib.aclosing(
            self._store.watch_children(drain_path(self.region))
        ) as watch:
            async for names in watch:
                following()
                pairs = (name.split(SEPARATOR, 1) for name in names if SEPARATOR in name)
                self.drained = frozenset((ns, stream) for ns, stream in pairs)
                self.whole_region = WHOLE_REGION in names
                self.changed.set()

    async def stop(self) -> None:
        await self._follower.stop()
