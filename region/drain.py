"""Draining: an operator tells one region's write proxies to stop taking a stream's writes.

    /globelog/drain/<region>/<namespace>~<stream>     one znode per drained stream

A region's proxies watch their region's folder: a drained stream they own is released (its
segment completed, its lock freed) and its requests are redirected to a write proxy of
another region, which takes the stream. Removing the znode ends the drain.
"""

from __future__ import annotations

import asyncio
import logging

from core.errors import GlobelogError, NodeExistsError, NoNodeError
from global_meta import MetaStore
from region.registry import cancel_and_wait

ROOT = "/globelog/drain"
SEPARATOR = "~"  # never in a namespace or stream name
log = logging.getLogger(__name__)


def drain_path(region: str, namespace: str = "", stream: str = "") -> str:
    base = f"{ROOT}/{region}"
    return f"{base}/{namespace}{SEPARATOR}{stream}" if stream else base


async def set_drained(
    store: MetaStore, region: str, namespace: str, stream: str, drained: bool
) -> bool:
    """Drains (or undrains) the stream in `region`; False when it already was (or was not)."""
    path = drain_path(region, namespace, stream)
    try:
        if drained:
            await store.create(path, b"", make_parents=True)
        else:
            await store.delete(path, version=-1)
    except (NodeExistsError, NoNodeError):
        return False
    return True


class DrainWatch:
    """The drained streams of one region, kept current by a ZooKeeper watch."""

    def __init__(self, store: MetaStore, region: str) -> None:
        self._store = store
        self.region = region
        self.drained: frozenset[tuple[str, str]] = frozenset()
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._store.ensure_path(drain_path(self.region))
        self._task = asyncio.get_running_loop().create_task(self._follow())

    async def _follow(self) -> None:
        try:
            async for names in self._store.watch_children(drain_path(self.region)):
                pairs = (name.split(SEPARATOR, 1) for name in names if SEPARATOR in name)
                self.drained = frozenset((ns, stream) for ns, stream in pairs)
                self.changed.set()
        except GlobelogError as err:
            log.error("stopped following the drained streams of %s: %s", self.region, err)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
