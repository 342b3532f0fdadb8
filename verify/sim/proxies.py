"""globelog's real proxies and rebuilders as processes of a simulated deployment.

Each proxy of the topology runs on a simulated host at its own address, as `globelog serve
write-proxy|read-proxy` runs it (cli/serve.py): its own ZooKeeper session (a SimMetaStore), a
ledger client, and the real WriteProxy or ReadProxy (aiohttp, ownership, idempotence, the
stream cache) serving HTTP over simulated TCP. Clients reach them with the real ProxyClient,
given `SimConnector`. Security is off (the simulation does not run TLS or tokens). A rebuilder
runs in every region as `globelog serve rebuilder` runs it: an auditor candidate and a rebuild
worker (rebuild/service.py) over its own session and ledger client.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from core.topology import Endpoint, Proxy, Topology
from ledger import LedgerClient, LedgerConfig
from rebuild.service import Rebuilder
from region.ownership import OwnershipConfig
from region.read_proxy import ReadProxy
from region.registry import ProxyInfo
from region.write_proxy import WriteProxy
from verify.sim.io.cluster import PASSWORD, SimCluster
from verify.sim.io.loop import Host
from verify.sim.io.zookeeper import SimMetaStore

SESSION_TIMEOUT_S = 1.5  # the proxies' ZooKeeper session (the realistic profile's)


@dataclass(slots=True)
class SimProxy:
    proxy: Proxy
    kind: str  # "write" | "read" | "rebuilder"
    host: Host
    task: asyncio.Task[None] | None = None
    store: SimMetaStore | None = None  # its ZooKeeper session, once connected
    server: WriteProxy | ReadProxy | None = None  # once serving

    @property
    def url(self) -> str:
        return f"http://{self.proxy.endpoint.address}"


def proxies_of(cluster: SimCluster, kind: str) -> list[SimProxy]:
    """A host for each proxy of `kind` in the topology (not started)."""
    found = []
    for region in cluster.topology.regions:
        listed = region.write_proxies if kind == "write" else region.read_proxies
        for proxy in listed:
            host = cluster.loop.hosts.get(proxy.name) or cluster.loop.add_host(
                proxy.name, proxy.region, proxy.endpoint.host
            )
            found.append(SimProxy(proxy, kind, host))
    return found


def rebuilders_of(cluster: SimCluster) -> list[SimProxy]:
    """A host for a rebuilder in each region (not started); named as the local cluster's."""
    found = []
    for number, region in enumerate(cluster.topology.region_names):
        name = f"rebuilder-{region}"
        host = cluster.loop.hosts.get(name) or cluster.loop.add_host(
            name, region, f"127.0.{number + 1}.202"
        )
        found.append(SimProxy(Proxy(name, region, Endpoint(host.ip, 0)), "rebuilder", host))
    return found


def ledger_config(topology: Topology, region: str) -> LedgerConfig:
    """The ledger client's settings of a simulated process in `region`."""
    return LedgerConfig(
        region=region,
        password=PASSWORD,
        min_regions_for_durability=topology.replication.min_regions_for_durability,
    )


def start(cluster: SimCluster, proxy: SimProxy) -> None:
    """The proxy's process starts (again, after a crash: with nothing of the old one)."""
    if not proxy.host.up:
        cluster.loop.restart(proxy.host)
    proxy.task = cluster.loop.spawn(proxy.host, _serve(cluster, proxy), name=proxy.proxy.name)


async def _serve(cluster: SimCluster, proxy: SimProxy) -> None:
    topology, spec = cluster.topology, proxy.proxy
    me = ProxyInfo(spec.name, spec.region, proxy.url)
    store = await SimMetaStore.connect(cluster.ensemble, session_timeout_s=SESSION_TIMEOUT_S)
    proxy.store = store
    ledgers = await LedgerClient.connect(store, ledger_config(topology, spec.region))
    server: WriteProxy | ReadProxy
    if proxy.kind == "rebuilder":
        rebuilder = Rebuilder(store, ledgers, topology.rebuild, spec.name, spec.region)
        rebuilder.start()
        await asyncio.sleep(365 * 24 * 3600)
    if proxy.kind == "write":
        ownership = OwnershipConfig(
            me,
            topology.replication,
            topology.streams,
            takeover_wait_s=2 * SESSION_TIMEOUT_S + 1,
            lost_bookie_delay_s=topology.rebuild.lost_bookie_delay_s,
        )
        server = WriteProxy(ownership, store, ledgers, topology.limits)
    else:
        server = ReadProxy(me, store, ledgers, topology.limits)
    await server.start(spec.endpoint.host, spec.endpoint.port)
    proxy.server = server
    await asyncio.sleep(365 * 24 * 3600)  # serves until the run ends (or it crashes)
