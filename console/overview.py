"""The console's overview, kept current in the background: every node's health, the WAN as
seen from the console's region, what is under-replicated, and the owner changes seen.

One round every ROUND_EVERY_S, each bounded by ROUND_TIMEOUT_S (a probe that hangs makes a
round late, never the page: the page shows the last finished round and its age). Owner
changes are those this console saw between two rounds, for at most OWNERS_WATCHED_MAX
streams: a console started later does not know older ones.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from console.health import NodeProbes, deployment_status
from core.errors import NoNodeError
from core.routes import PublishedTopology, publish_topology
from core.topology import Topology
from global_meta import MetaStore
from global_meta.followers import Follower
from global_meta.streams import ROOT, StreamMetaStore
from ledger import BookieUnreachableError, UnderReplication

log = logging.getLogger(__name__)
T = TypeVar("T")

ROUND_EVERY_S = 1.0
ROUND_TIMEOUT_S = 4.0
PART_TIMEOUT_S = 3.5  # each part of a round (node probes, WAN pings, ...)
WAN_PING_TIMEOUT_S = 1.5
WAN_PINGS = 3  # per bookie and round; the median is shown
OWNERS_EVERY_ROUNDS = 3  # owners are polled every third round (three reads per stream)
OWNERS_WATCHED_MAX = 256
OWNER_CHANGES_KEPT = 100
NAMESPACES_LISTED_MAX = 1000


class Overview:
    def __init__(
        self,
        topology: Topology,
        store: MetaStore,
        region: str,
        token: str | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.topology = topology
        self.region = region
        self._store = store
        self._token = token
        self._clock = clock
        self._published: PublishedTopology = publish_topology(topology)
        self._owners: dict[tuple[str, str], str | None] = {}
        self.owner_changes: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=OWNER_CHANGES_KEPT
        )
        self.snapshot: dict[str, Any] = {"at_ms": None, "nodes": [], "regions": []}
        self._rounds = 0
        self._probes = NodeProbes(topology)  # connections kept from round to round
        self.follower = Follower(f"console overview ({region})", self._follow)

    async def close(self) -> None:
        """After `follower.stop()`: the kept connections closed."""
        await self._probes.close()

    async def _follow(self, following: Callable[[], None]) -> None:
        while True:
            started = time.monotonic()
            try:
                async with asyncio.timeout(ROUND_TIMEOUT_S):
                    self.snapshot = await self.round()
                following()
            except TimeoutError:
                log.warning(
                    "overview round took over %.1f s; showing the last one", ROUND_TIMEOUT_S
                )
            await asyncio.sleep(max(0.0, ROUND_EVERY_S - (time.monotonic() - started)))

    async def round(self) -> dict[str, Any]:
        # each part has its own bound and its own fallback: one part failing (the
        # under-replication walk while ZooKeeper is away) does not freeze the others
        nodes, wan, under, _ = await asyncio.gather(
            _part(
                "nodes",
                deployment_status(self.topology, self._store, self._token, self._probes),
                [],
            ),
            _part("wan", self.wan(), []),
            _part("under-replication", self._under_replicated(), {"ledgers": None}),
            _part("owners", self._poll_owners_now(), None),
        )
        regions = []
        for region in self.topology.regions:
            mine = [n for n in nodes if n["region"] == region.name]
            regions.append(
                {
                    "name": region.name,
                    "nodes": mine,
                    "up": sum(n["state"] == "up" for n in mine),
                    "down": [n["name"] for n in mine if n["state"] == "down"],
                    "state": _region_state(mine),
                }
            )
        return {
            "at_ms": int(self._clock() * 1000),
            "console_region": self.region,
            "regions": regions,
            "nodes": nodes,
            "wan": wan,
            "under_replicated": under,
            "owner_changes": list(reversed(self.owner_changes)),
        }

    async def wan(self) -> list[dict[str, Any]]:
        """Round trips from this region to each region's bookies, on the addresses this
        region's clients dial (through the WAN emulation where there is one)."""

        async def one(bookie_id: str) -> float | None:
            address = self._published.address(self.region, bookie_id)
            times = []
            for _ in range(WAN_PINGS):
                try:
                    times.append(await self._probes.bookies.ping(address, WAN_PING_TIMEOUT_S))
                except BookieUnreachableError:
                    return None
            return statistics.median(times)

        bookies = self._published.bookies
        answers = await asyncio.gather(*(one(b.bookie_id) for b in bookies))
        found = []
        for region in self._published.regions:
            times = [t for b, t in zip(bookies, answers, strict=True) if b.region == region and t]
            found.append(
                {
                    "from": self.region,
                    "to": region,
                    "rtt_ms": round(min(times) * 1000, 1) if times else None,
                    "bookies_answering": len(times),
                    "bookies": sum(b.region == region for b in bookies),
                }
            )
        return found

    async def _poll_owners_now(self) -> None:
        self._rounds += 1
        if self._rounds % OWNERS_EVERY_ROUNDS == 1:
            await self._poll_owners()

    async def _under_replicated(self) -> dict[str, Any]:
        under = UnderReplication(self._store)
        marked = await under.marked()
        return {"ledgers": len(marked), "sample": sorted(marked)[:20]}

    async def _poll_owners(self) -> None:
        try:
            namespaces = sorted(await self._store.children(ROOT))[:NAMESPACES_LISTED_MAX]
        except NoNodeError:  # no stream made yet
            return
        watched: list[tuple[str, str]] = []
        for namespace in namespaces:
            if len(watched) >= OWNERS_WATCHED_MAX:
                break
            streams = await StreamMetaStore(self._store, namespace).list_streams()
            watched += [(namespace, s) for s in sorted(streams)]
        watched = watched[:OWNERS_WATCHED_MAX]
        owners = await asyncio.gather(
            *(StreamMetaStore(self._store, ns).owner(s) for ns, s in watched)
        )
        now_ms = int(self._clock() * 1000)
        for key, owner in zip(watched, owners, strict=True):
            if key in self._owners and self._owners[key] != owner:
                self.owner_changes.append(
                    {
                        "at_ms": now_ms,
                        "namespace": key[0],
                        "stream": key[1],
                        "from": self._owners[key],
                        "to": owner,
                    }
                )
        self._owners = dict(zip(watched, owners, strict=True))


async def _part(what: str, work: Awaitable[T], fallback: T) -> T:
    """`work` within PART_TIMEOUT_S; `fallback` (and a log line) if it fails or runs over."""
    try:
        async with asyncio.timeout(PART_TIMEOUT_S):
            return await work
    except Exception as err:  # noqa: BLE001 - shown as unknown on the page, said in the log
        log.warning("overview: %s failed: %r", what, err)
        return fallback


def _region_state(nodes: list[dict[str, str]]) -> str:
    if not nodes:
        return "empty"
    if all(n["state"] == "down" for n in nodes if n["kind"] != "rebuilder"):
        return "down"
    return "up" if all(n["state"] == "up" for n in nodes) else "degraded"
