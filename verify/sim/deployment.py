"""The simulated deployment as a failover run's deployment (verify/run/deployment.py): globelog's
real proxies on simulated hosts (verify/sim/proxies.py), clients on a host of their region, and
the faults as the simulated world applies them (a crash is SIGKILL, a pause SIGSTOP, a cut
region pair holds every byte between them, a region down takes its ZooKeeper server, bookies
and proxies)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import aiohttp

from ledger import LedgerConfig
from region.client import ProxyClient
from verify.run.rebuilt import rebuilt, settle_rebuilding
from verify.sim import proxies
from verify.sim.io.cluster import SimCluster
from verify.sim.io.http import SimConnector
from verify.sim.io.loop import Host
from verify.sim.io.zookeeper import SimMetaStore
from verify.sim.proxies import SimProxy

T = TypeVar("T")


class SimFaults:
    def __init__(self, cluster: SimCluster, proxies_by_name: dict[str, SimProxy]) -> None:
        self.cluster = cluster
        self.loop = cluster.loop
        self.proxies = proxies_by_name
        self._wiped: set[str] = set()

    def _host(self, name: str) -> Host:
        return self.loop.hosts[name]

    async def kill(self, name: str) -> str:
        machine_up = self.loop.rng.random() < 0.5  # a process killed, or its machine gone
        self.loop.crash(self._host(name), machine_up=machine_up)
        return f"{name} killed" + ("" if machine_up else " with its machine")

    async def restart(self, name: str) -> str:
        if name in self.cluster.bookies:
            self.cluster.restart_bookie(name, wiped=name in self._wiped)
            self._wiped.discard(name)
        elif not self._host(name).up:
            proxies.start(self.cluster, self.proxies[name])
        return f"{name} started"

    async def pause(self, name: str) -> str:
        self.loop.pause(self._host(name))
        return f"{name} paused"

    async def resume(self, name: str) -> str:
        self.loop.resume(self._host(name))
        return f"{name} resumed"

    async def partition(self, a: str, b: str) -> str:
        self.cluster.network.cut.add(frozenset((a, b)))
        return f"{a} and {b} cut apart"

    async def heal(self) -> str:
        self.cluster.network.cut.clear()
        return "every region reaches every other"

    async def isolate(self, region: str) -> str:
        others = [r for r in self.cluster.topology.region_names if r != region]
        self.cluster.network.cut.update(frozenset((region, o)) for o in others)
        return f"{region} cut from {', '.join(others)}"

    def _in_region(self, region: str) -> list[str]:
        topology = self.cluster.topology
        return [b.name for b in topology.bookies if b.region == region] + [
            p.proxy.name for p in self.proxies.values() if p.proxy.region == region
        ]

    async def region_down(self, region: str) -> str:
        names = self._in_region(region)
        for name in names:
            self.loop.crash(self._host(name), machine_up=False)
        self.cluster.ensemble.down.add(region)
        return f"{region} down: its ZooKeeper server and {', '.join(names)}"

    async def region_up(self, region: str) -> str:
        self.cluster.ensemble.down.discard(region)
        for name in self._in_region(region):
            await self.restart(name)
        return f"{region} up"

    async def slow(self, bookie: str, extra_ms: int) -> str:
        self.cluster.network.slowed[bookie] = extra_ms / 1000
        return f"{bookie} +{extra_ms} ms to other regions"

    async def unslow(self) -> str:
        self.cluster.network.slowed.clear()
        return "no route slowed"

    async def expire_session(self, proxy: str) -> str:
        store = self.proxies[proxy].store
        session = None if store is None else store.session_id
        if session is None:
            return f"{proxy} has no session to expire"
        self.cluster.ensemble.end_session(session)
        return f"{proxy}'s session {session:#x} expired"

    async def wipe(self, bookie: str) -> str:
        """The bookie's disk is lost: it stops, and starts again empty only at the heal."""
        self.loop.crash(self._host(bookie), machine_up=False)
        self.cluster.bookies[bookie].server.wipe()
        self._wiped.add(bookie)
        return f"{bookie} wiped"

    async def revive(self, said: Callable[[str], None]) -> None:
        return None  # a simulated process stops only by the nemesis's hand

    async def rebuilt(self, bookie_id: str, bound_s: float) -> str:
        async with await SimMetaStore.connect(self.cluster.ensemble) as store:
            return await rebuilt(store, bookie_id, bound_s)


class SimDeployment:
    """Every proxy of the simulated topology, started by `start()`, and its clients."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.topology = cluster.topology
        self.write_proxies = proxies.proxies_of(cluster, "write")
        self.read_proxies = proxies.proxies_of(cluster, "read")
        self.rebuilders = proxies.rebuilders_of(cluster)
        self.processes = [*self.write_proxies, *self.read_proxies, *self.rebuilders]
        by_name = {p.proxy.name: p for p in self.processes}
        self.faults = SimFaults(cluster, by_name)
        self._clients: dict[str, Host] = {}

    def start(self) -> None:
        for process in self.processes:
            proxies.start(self.cluster, process)

    def in_region(self, region: str, work: Coroutine[Any, Any, T]) -> Awaitable[T]:
        host = self._clients.get(region)
        if host is None:
            host = self._clients[region] = self.cluster.add_host(f"client-{region}", region)
        return self.cluster.loop.spawn(host, work)

    def write_urls(self, region: str) -> list[str]:
        ordered = sorted(self.write_proxies, key=lambda p: p.proxy.region != region)
        return [p.url for p in ordered]

    def read_url(self, region: str) -> str:
        return next(p.url for p in self.read_proxies if p.proxy.region == region)

    def client(self, urls: list[str], namespace: str, deadline_s: float) -> ProxyClient:
        return ProxyClient(
            urls, namespace, deadline_s=deadline_s, tls=False, connector=SimConnector
        )

    def http(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=SimConnector())

    @asynccontextmanager
    async def meta_session(self, region: str) -> AsyncIterator[SimMetaStore]:
        async with await SimMetaStore.connect(self.cluster.ensemble) as store:
            yield store

    def ledger_config(self, region: str) -> LedgerConfig:
        return proxies.ledger_config(self.topology, region)

    async def settle_rebuilding(self, bound_s: float) -> str:
        async with self.meta_session(self.topology.region_names[0]) as store:
            return await settle_rebuilding(store, bound_s)
