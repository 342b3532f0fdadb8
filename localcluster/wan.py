"""The emulated WAN: toxiproxy proxies per cross-region route, latency, partitions and heals."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import aiohttp

from core.errors import ClusterError, ConfigError
from core.routes import Route, plan_routes
from core.topology import Topology, WanLink
from localcluster import election_links

HTTP_TIMEOUT_S = 5.0
PARTITION_TOXIC = "partition"
SLOW_TOXIC = "slow"


class Toxiproxy:
    """A small async client of toxiproxy's HTTP API."""

    def __init__(self, api: str) -> None:
        self._base = f"http://{api}"
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S))

    async def __aenter__(self) -> Toxiproxy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._session.close()

    async def _call(
        self, method: str, path: str, body: Any = None, ok: Iterable[int] = (200,)
    ) -> Any:
        try:
            async with self._session.request(method, self._base + path, json=body) as response:
                text = await response.text()
                if response.status not in ok:
                    raise ClusterError(
                        f"toxiproxy {method} {path}: HTTP {response.status}: {text.strip()[:200]}"
                    )
                return await response.json(content_type=None) if text else None
        except (aiohttp.ClientError, TimeoutError) as err:
            raise ClusterError(f"toxiproxy {method} {path}: {err!r}") from err

    async def version(self) -> str:
        async with self._session.get(self._base + "/version") as response:
            return (await response.text()).strip()

    async def proxies(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("GET", "/proxies")
        return result

    async def ensure_proxy(self, route: Route) -> None:
        body = {
            "name": route.name,
            "listen": route.listen.address,
            "upstream": route.upstream.address,
            "enabled": True,
        }
        await self._call("POST", "/proxies", body, ok=(201, 409))

    async def set_toxic(
        self, proxy: str, name: str, kind: str, stream: str, attributes: dict[str, int]
    ) -> None:
        body = {
            "name": name,
            "type": kind,
            "stream": stream,
            "toxicity": 1.0,
            "attributes": attributes,
        }
        existing = await self._call("GET", f"/proxies/{proxy}/toxics")
        if any(t["name"] == name for t in existing or []):
            await self._call("POST", f"/proxies/{proxy}/toxics/{name}", body)
        else:
            await self._call("POST", f"/proxies/{proxy}/toxics", body)

    async def set_enabled(self, route: Route, enabled: bool) -> None:
        body = {
            "name": route.name,
            "listen": route.listen.address,
            "upstream": route.upstream.address,
            "enabled": enabled,
        }
        await self._call("POST", f"/proxies/{route.name}", body)

    async def remove_toxic(self, proxy: str, name: str) -> None:
        await self._call("DELETE", f"/proxies/{proxy}/toxics/{name}", ok=(204, 404))


def latency_attributes(link: WanLink) -> dict[str, int]:
    """toxiproxy's latency toxic in whole milliseconds (the loader only accepts whole ms)."""
    return {"latency": round(link.one_way_ms), "jitter": round(link.jitter_ms)}


async def configure_wan(topology: Topology, profile: str) -> list[Route]:
    """Creates every route's proxy with its link latency in both directions (idempotent)."""
    routes = plan_routes(topology)
    async with Toxiproxy(topology.emulated_wan.toxiproxy.address) as api:
        for route in routes:
            await api.ensure_proxy(route)
            link = topology.emulated_wan.link(profile, route.from_region, route.to_region)
            for stream in ("upstream", "downstream"):
                await api.set_toxic(
                    route.name, f"wan-{stream}", "latency", stream, latency_attributes(link)
                )
    return routes


def routes_between(topology: Topology, region_a: str, region_b: str) -> list[Route]:
    return [
        r for r in plan_routes(topology) if {r.from_region, r.to_region} == {region_a, region_b}
    ]


def routes_of(topology: Topology, region: str) -> list[Route]:
    """Every route into or out of `region`: what isolating it cuts."""
    return [r for r in plan_routes(topology) if region in (r.from_region, r.to_region)]


async def partition(topology: Topology, region_a: str, region_b: str) -> list[Route]:
    """Cuts the link both ways. Bookie traffic is held, never delivered, as in a real
    partition (a client waits for its own timeouts). ZooKeeper's quorum links are closed and
    refused instead: ZooKeeper's leader election, given connections that hold messages
    forever, keeps electing the unreachable node and the majority side stays without a
    leader for minutes; with refused connections it elects within seconds, which is what a
    real partition gives once TCP gives up."""
    routes = routes_between(topology, region_a, region_b)
    await cut(topology, routes)
    return routes


async def cut(topology: Topology, routes: list[Route]) -> None:
    """Cuts `routes` all at once, as a real cut does (one by one, 20 routes took 3.6 s, and
    ZooKeeper elected a node half cut off meanwhile)."""
    await _set_cut(topology, routes, True)
    await election_links.cut_bypasses(topology, routes)


async def _set_cut(topology: Topology, routes: list[Route], cut: bool) -> None:
    """Cuts or restores every route of `routes` at once: bookie routes hold their traffic
    (a timeout toxic each way), ZooKeeper's are disabled (refused)."""

    async def one(api: Toxiproxy, route: Route) -> None:
        if route.kind != "bookie":
            await api.set_enabled(route, not cut)
            return
        for stream in ("upstream", "downstream"):
            name = f"{PARTITION_TOXIC}-{stream}"
            if cut:
                await api.set_toxic(route.name, name, "timeout", stream, {"timeout": 0})
            else:
                await api.remove_toxic(route.name, name)

    async with Toxiproxy(topology.emulated_wan.toxiproxy.address) as api:
        await asyncio.gather(*(one(api, route) for route in routes))


async def heal(
    topology: Topology, region_a: str | None = None, region_b: str | None = None
) -> list[Route]:
    """Removes partitions between two regions, or every partition when none are named."""
    routes = (
        plan_routes(topology)
        if region_a is None or region_b is None
        else routes_between(topology, region_a, region_b)
    )
    await _set_cut(topology, routes, False)
    return routes


async def slow(topology: Topology, target: str, extra_ms: int) -> list[Route]:
    """Adds `extra_ms` each way on every WAN route to `target` (a bookie or ZooKeeper node's
    name): a slow node as the other regions see it. Traffic inside its region does not cross
    the WAN emulator and stays fast; `pause` stalls a node for everyone."""
    if not 1 <= extra_ms <= 60_000:
        raise ConfigError(f"slow {target}: {extra_ms} ms; expected 1..60000")
    routes = [r for r in plan_routes(topology) if r.target == target]
    if not routes:
        names = sorted({r.target for r in plan_routes(topology)})
        raise ConfigError(f"slow {target!r}: no WAN route leads to it; targets are {names}")
    async with Toxiproxy(topology.emulated_wan.toxiproxy.address) as api:
        for route in routes:
            for stream in ("upstream", "downstream"):
                await api.set_toxic(
                    route.name, f"{SLOW_TOXIC}-{stream}", "latency", stream,
                    {"latency": extra_ms, "jitter": 0},
                )  # fmt: skip
    return routes


async def unslow(topology: Topology, target: str | None = None) -> list[Route]:
    """Removes `slow` from one target's routes, or from every route."""
    routes = [r for r in plan_routes(topology) if target is None or r.target == target]
    async with Toxiproxy(topology.emulated_wan.toxiproxy.address) as api:
        for route in routes:
            for stream in ("upstream", "downstream"):
                await api.remove_toxic(route.name, f"{SLOW_TOXIC}-{stream}")
    return routes


async def wan_status(topology: Topology) -> dict[str, dict[str, Any]]:
    """Per route: listen address, upstream, latency toxics and whether it is partitioned."""
    async with Toxiproxy(topology.emulated_wan.toxiproxy.address) as api:
        proxies = await api.proxies()
    status: dict[str, dict[str, Any]] = {}
    for route in plan_routes(topology):
        proxy = proxies.get(route.name)
        toxics = {t["name"]: t for t in (proxy or {}).get("toxics", [])}
        latency = toxics.get("wan-upstream", {}).get("attributes", {})
        slowed = toxics.get(f"{SLOW_TOXIC}-upstream", {}).get("attributes", {})
        status[route.name] = {
            "kind": route.kind,
            "from_region": route.from_region,
            "to_region": route.to_region,
            "listen": route.listen.address,
            "upstream": route.upstream.address,
            "present": proxy is not None,
            "one_way_ms": latency.get("latency"),
            "jitter_ms": latency.get("jitter"),
            "slow_ms": slowed.get("latency"),
            "partitioned": any(name.startswith(PARTITION_TOXIC) for name in toxics)
            or (proxy is not None and not proxy.get("enabled")),
        }
    return status
