"""A read proxy in the test process, on the test cluster, with its own ZooKeeper session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from cli.cluster.controller import Cluster
from global_meta import MetaStore
from ledger import LedgerClient, LedgerConfig
from region.read_proxy import ReadProxy
from region.registry import ProxyInfo


@asynccontextmanager
async def read_proxy(cluster: Cluster, region: str) -> AsyncIterator[ReadProxy]:
    proxy = cluster.topology.region(region).read_proxies[0]
    endpoint = proxy.endpoint
    me = ProxyInfo(proxy.name, region, f"http://{endpoint.host}:{endpoint.port}")
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(
            await MetaStore.connect(cluster.topology.zk_connect, session_timeout_s=4.0)
        )
        config = LedgerConfig(region=region, min_regions_for_durability=2)
        ledgers = await stack.enter_async_context(await LedgerClient.connect(store, config))
        server = ReadProxy(me, store, ledgers)
        await server.start(endpoint.host, endpoint.port)
        try:
            yield server
        finally:
            await server.stop()
