"""The emulated WAN on the real cluster: latency per link, partitions and heals."""

from __future__ import annotations

import asyncio

import pytest

from core.routes import plan_routes
from core.security.credentials import bookie_tls
from ledger.connections.ping import BookiePinger, ping_bookie
from ledger.errors import BookieUnreachableError
from localcluster import wan
from localcluster.controller import Cluster

WARM_UP_PINGS = 3


async def best_round_trip_s(address: str, samples: int = 5) -> float:
    for _ in range(WARM_UP_PINGS):
        await ping_bookie(address)
    return min([await ping_bookie(address) for _ in range(samples)])


async def test_cross_region_round_trip_pays_the_configured_latency(cluster: Cluster) -> None:
    for route in plan_routes(cluster.topology):
        if route.kind != "bookie":
            continue
        link = cluster.topology.wan.link("ci", route.from_region, route.to_region)
        floor_s = 2 * (link.one_way_ms - link.jitter_ms) / 1000
        # Even the fastest of several round trips pays the latency both ways.
        assert await best_round_trip_s(route.listen.address) >= floor_s, route.name


async def test_local_round_trip_skips_the_wan(cluster: Cluster) -> None:
    bookie = cluster.topology.bookies[0]
    slowest_link_ms = max(x.one_way_ms for x in cluster.topology.wan.profiles["ci"])
    direct = await best_round_trip_s(bookie.bookie_id, samples=10)
    assert direct < 2 * slowest_link_ms / 1000


async def test_partition_cuts_a_link_and_heal_restores_it(cluster: Cluster) -> None:
    routes = plan_routes(cluster.topology)
    cut = next(r for r in routes if {r.from_region, r.to_region} == {"us-east", "eu-west"})
    spared = next(r for r in routes if {r.from_region, r.to_region} == {"us-east", "us-west"})
    reverse = next(r for r in routes if (r.from_region, r.to_region) == ("eu-west", "us-east"))
    await wan.partition(cluster.topology, "us-east", "eu-west")
    try:
        for route in (cut, reverse):
            with pytest.raises(BookieUnreachableError, match=r"no answer in 1\.0 s"):
                await ping_bookie(route.listen.address, timeout_s=1.0)
        await ping_bookie(spared.listen.address, timeout_s=5.0)
        status = await wan.wan_status(cluster.topology)
        assert status[cut.name]["partitioned"] and not status[spared.name]["partitioned"]
    finally:
        await wan.heal(cluster.topology, "us-east", "eu-west")
    for route in (cut, reverse):
        await ping_bookie(route.listen.address, timeout_s=5.0)
    assert not any(r["partitioned"] for r in (await wan.wan_status(cluster.topology)).values())


async def test_a_pinger_keeps_its_connection_and_makes_a_new_one_after_a_cut(
    cluster: Cluster,
) -> None:
    """The console's pings: one TLS connection per bookie while it answers (two pings that
    connect at once keep one of their connections); a cut makes the ping fail within its
    bound, and the first ping after the heal connects afresh."""
    route = next(
        r
        for r in plan_routes(cluster.topology)
        if r.kind == "bookie" and {r.from_region, r.to_region} == {"us-east", "eu-west"}
    )
    pinger = BookiePinger(bookie_tls(cluster.topology.security))
    try:
        await asyncio.gather(*(pinger.ping(route.listen.address, timeout_s=5.0) for _ in "ab"))
        for _ in range(3):
            await pinger.ping(route.listen.address, timeout_s=5.0)
        assert pinger.connections_made == 1
        await wan.partition(cluster.topology, route.from_region, route.to_region)
        try:
            with pytest.raises(BookieUnreachableError, match=r"no answer in 1\.0 s"):
                await asyncio.wait_for(pinger.ping(route.listen.address, timeout_s=1.0), 1.5)
        finally:
            await wan.heal(cluster.topology, route.from_region, route.to_region)
        await pinger.ping(route.listen.address, timeout_s=5.0)
        assert pinger.connections_made == 2
    finally:
        await pinger.close()
