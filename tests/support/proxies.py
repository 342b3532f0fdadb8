"""Write and read proxies in the test process, on the test cluster, each with its own
ZooKeeper session and ledger client as a proxy process has."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from core.settings.limits import ProxyLimits
from global_meta import MetaStore
from ledger import LedgerClient, LedgerConfig
from localcluster.controller import Cluster
from region.ownership import OwnershipConfig
from region.read_proxy import ReadProxy
from region.registry import ProxyInfo
from region.security.service import ProxySecurity
from region.write_proxy import WriteProxy
from tests.support.streams import REPLICATION


@asynccontextmanager
async def _proxy(cluster: Cluster, region: str, kind: str, make: Any) -> AsyncIterator[Any]:
    found = cluster.topology.region(region)
    proxy = (found.write_proxies if kind == "write" else found.read_proxies)[0]
    endpoint = proxy.endpoint
    me = ProxyInfo(proxy.name, region, cluster.topology.proxy_url(proxy))
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(
            await MetaStore.of(cluster.topology, session_timeout_s=4.0)
        )
        config = dataclasses.replace(
            LedgerConfig.of(cluster.topology, region), min_regions_for_durability=2
        )
        ledgers = await stack.enter_async_context(await LedgerClient.connect(store, config))
        server = make(me, store, ledgers, endpoint.host)
        await server.start(endpoint.host, endpoint.port)
        try:
            yield server
        finally:
            await server.stop()


def write_proxy(
    cluster: Cluster,
    region: str,
    limits: ProxyLimits | None = None,
    lost_bookie_delay_s: float = 60.0,
) -> Any:  # an async context manager giving a WriteProxy
    def make(me: ProxyInfo, store: MetaStore, ledgers: LedgerClient, host: str) -> WriteProxy:
        config = OwnershipConfig(
            me, REPLICATION, cluster.topology.streams, lost_bookie_delay_s=lost_bookie_delay_s
        )
        security = ProxySecurity.load(
            cluster.topology.security, store, limits or ProxyLimits(), issues=True, host=host
        )
        return WriteProxy(config, store, ledgers, limits, security)

    return _proxy(cluster, region, "write", make)


def read_proxy(
    cluster: Cluster, region: str, limits: ProxyLimits | None = None
) -> Any:  # ... giving a ReadProxy
    def make(me: ProxyInfo, store: MetaStore, ledgers: LedgerClient, host: str) -> ReadProxy:
        security = ProxySecurity.load(
            cluster.topology.security, store, limits or ProxyLimits(), issues=False, host=host
        )
        return ReadProxy(me, store, ledgers, limits, security)

    return _proxy(cluster, region, "read", make)
