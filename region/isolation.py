"""Is this process cut off from most regions, or is ZooKeeper only electing a leader?

Both look the same from a ZooKeeper client: its server drops the connection and refuses new
ones. A server cut off from the quorum stays that way until the cut heals, and the process
must then let its streams go (the quorum has expired its session and other regions' proxies
take them over); a server whose ensemble is electing serves again in seconds, and the session
lives on. The bookies tell the two apart: a process that still reaches bookies in a majority
of regions (its own counted) is on the quorum's side of any cut.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from core.routes import PublishedTopology
from ledger import BookieUnreachableError, ping_bookie

PING_TIMEOUT_S = 0.5  # the check's answer within the MetaStore's ISOLATION_CHECK_LEAD_S


def cut_off_check(
    current: Callable[[], PublishedTopology], region: str, timeout_s: float = PING_TIMEOUT_S
) -> Callable[[], Awaitable[bool]]:
    """A check for MetaStore.isolation_check: True when fewer than a majority of regions
    answer (a bookie of each other region is pinged, all at once, for `timeout_s`).
    `current` gives the newest published topology: regions join and leave."""

    async def cut_off() -> bool:
        topology = current()
        others = [r for r in topology.regions if r != region]
        reached = await asyncio.gather(*(_reaches(topology, region, r, timeout_s) for r in others))
        return (1 + sum(reached)) * 2 <= len(topology.regions)

    return cut_off


async def _reaches(topology: PublishedTopology, me: str, region: str, timeout_s: float) -> bool:
    """Whether any bookie of `region` answers a ping from `me` within `timeout_s`."""
    bookies = [b.bookie_id for b in topology.bookies if b.region == region]
    if not bookies:
        return False

    async def one(bookie_id: str) -> bool:
        try:
            # in clear: a bookie that serves TLS only still answers (EUA), which is all
            # reachability asks, and no handshake stands between a cut and its detection
            await ping_bookie(topology.address(me, bookie_id), timeout_s=timeout_s)
        except BookieUnreachableError:
            return False
        return True

    try:
        async with asyncio.timeout(timeout_s + 0.2):  # each ping is bounded; this bounds all
            return any(await asyncio.gather(*(one(b) for b in bookies)))
    except TimeoutError:
        return False
