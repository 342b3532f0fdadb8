"""The local cluster as a failover run's deployment (verify/run/deployment.py): its proxies over
loopback and the WAN emulator, the operator's token and CA, ZooKeeper sessions as a deployed
process opens them, and its own controls for the faults."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import aiohttp

from global_meta import MetaStore
from global_meta.session import MetaSession
from ledger import LedgerConfig
from localcluster import controller, regions, wan
from localcluster.controller import Cluster
from localcluster.probes import operator_session
from localcluster.tails import proxy_url
from localcluster.tools import Tools
from region.client import ProxyClient
from verify.run.rebuilt import rebuilt, settle_rebuilding

T = TypeVar("T")


class LiveFaults:
    def __init__(self, cluster: Cluster, tools: Tools) -> None:
        self.cluster, self.tools, self.topology = cluster, tools, cluster.topology

    async def kill(self, name: str) -> str:
        return await controller.fault(self.cluster, self.tools, "kill", name)

    async def restart(self, name: str) -> str:
        return await controller.fault(self.cluster, self.tools, "restart", name)

    async def pause(self, name: str) -> str:
        return await controller.fault(self.cluster, self.tools, "pause", name)

    async def resume(self, name: str) -> str:
        return await controller.fault(self.cluster, self.tools, "resume", name)

    async def partition(self, a: str, b: str) -> object:
        return await wan.partition(self.topology, a, b)

    async def heal(self) -> object:
        return await wan.heal(self.topology)

    async def isolate(self, region: str) -> object:
        return await regions.isolate(self.cluster, region)

    async def region_down(self, region: str) -> object:
        return await regions.region_down(self.cluster, region)

    async def region_up(self, region: str) -> object:
        return await regions.region_up(self.cluster, self.tools, region)

    async def slow(self, bookie: str, extra_ms: int) -> object:
        return await wan.slow(self.topology, bookie, extra_ms)

    async def unslow(self) -> object:
        return await wan.unslow(self.topology)

    async def expire_session(self, proxy: str) -> str:
        return await controller.expire_session(self.cluster, proxy)

    async def wipe(self, bookie: str) -> str:
        return await controller.wipe_bookie(self.cluster, bookie)

    async def revive(self, said: Callable[[str], None]) -> None:
        await controller.revive(self.cluster, self.tools, said)

    async def rebuilt(self, bookie_id: str, bound_s: float) -> str:
        async with await MetaStore.of(self.topology) as store:
            return await rebuilt(store, bookie_id, bound_s)


class LiveDeployment:
    def __init__(self, cluster: Cluster, tools: Tools) -> None:
        self.cluster = cluster
        self.topology = cluster.topology
        self.faults = LiveFaults(cluster, tools)

    def in_region(self, region: str, work: Coroutine[Any, Any, T]) -> Awaitable[T]:
        return work

    def write_urls(self, region: str) -> list[str]:
        names = self.topology.region_names
        return [
            proxy_url(self.cluster, r, "write")
            for r in [region, *(n for n in names if n != region)]
        ]

    def read_url(self, region: str) -> str:
        return proxy_url(self.cluster, region, "read")

    def client(self, urls: list[str], namespace: str, deadline_s: float) -> ProxyClient:
        return ProxyClient(urls, namespace, deadline_s=deadline_s)

    def http(self) -> aiohttp.ClientSession:
        return operator_session()

    @asynccontextmanager
    async def meta_session(self, region: str) -> AsyncIterator[MetaSession]:
        async with await MetaStore.of(self.topology, region) as store:
            yield store

    def ledger_config(self, region: str) -> LedgerConfig:
        return LedgerConfig.of(self.topology, region)

    async def settle_rebuilding(self, bound_s: float) -> str:
        async with await MetaStore.of(self.topology) as store:
            return await settle_rebuilding(store, bound_s)
