"""A simulated deployment for globelog's real code: regions, a ZooKeeper ensemble (one server
per region), bookies that register in it as real ones do, and a topology that names them.

Every bookie is a simulated host with its own address (port 3181), its storage kept across
crashes, and its registration an ephemeral node of its own ZooKeeper session, so a crashed or
paused bookie leaves the registry once that session expires, as a real one does. The topology
is a deployment's (no WAN emulator: addresses are direct) with security off, since TLS is not
simulated; the ledger password is the simulation's own.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import yaml

from core.routes import TOPOLOGY_ZNODE, encode_published, publish_topology
from core.topology import Topology
from core.topology_loader import parse_topology
from ledger import LEDGERS_ROOT, init_cluster_metadata
from verify.sim.bookie import SimBookie
from verify.sim.io.bookie_server import BOOKIE_PORT, BookieServer
from verify.sim.io.loop import Host, SimLoop
from verify.sim.io.network import Network
from verify.sim.io.zookeeper import SimMetaStore, ZooKeeperEnsemble

REGIONS = ("us-east", "us-west", "eu-west")
# one way, seconds: the realistic profile's shape (docs/failover.md)
WAN_S = {
    frozenset(("us-east", "us-west")): 0.043,
    frozenset(("us-east", "eu-west")): 0.040,
    frozenset(("us-west", "eu-west")): 0.068,
}
PASSWORD = b"globelog-simulation"
BOOKIE_SESSION_S = 4.0
AVAILABLE = f"{LEDGERS_ROOT}/available"


@dataclass(frozen=True, slots=True)
class Shape:
    regions: Sequence[str] = REGIONS
    racks: int = 2
    bookies_per_rack: int = 1
    ensemble_size: int = 4
    write_quorum: int = 4
    ack_quorum: int = 3
    min_regions_for_durability: int = 2
    wan_s: dict[frozenset[str], float] = field(default_factory=lambda: dict(WAN_S))


@dataclass(slots=True)
class SimBookieNode:
    server: BookieServer
    bookie_id: str
    registered: asyncio.Task[None] | None = None

    @property
    def host(self) -> Host:
        return self.server.host


@functools.lru_cache(maxsize=8)
def _parsed(document: str) -> Topology:
    """The topology of a shape, parsed once per process (every seed of a batch shares it)."""
    return parse_topology(document, "<simulation>")


class SimCluster:
    """The world of one seed: `start()` it inside `verify.sim.io.loop.run`."""

    def __init__(self, seed: int, shape: Shape | None = None) -> None:
        self.shape = shape if shape is not None else Shape()
        self.loop = SimLoop(seed)
        self.network = Network(self.loop, self.loop.rng, self.shape.wan_s)
        self.ensemble = ZooKeeperEnsemble(self.loop, self.network, self.shape.regions)
        self.topology = _parsed(yaml.safe_dump(self._document()))
        self.bookies: dict[str, SimBookieNode] = {}
        for number, bookie in enumerate(self.topology.bookies):
            host = self.loop.add_host(bookie.name, bookie.region, bookie.endpoint.host)
            server = BookieServer(self.loop, self.network, host, SimBookie(bookie.name))
            self.bookies[bookie.name] = SimBookieNode(server, bookie.bookie_id)
            assert bookie.endpoint.port == BOOKIE_PORT, (number, bookie)
        self._admin = self.loop.add_host("admin", self.shape.regions[0], "127.0.250.1")
        self._ips = 0

    def _document(self) -> dict[str, object]:
        shape = self.shape
        regions = []
        for r, region in enumerate(shape.regions):
            racks = [
                {
                    "name": f"rack-{rack}",
                    "bookies": [
                        {
                            "name": f"bk-{r}{rack}{i}",
                            "host": f"127.0.{r + 1}.{10 * k + i + 1}",
                            "port": BOOKIE_PORT,
                        }
                        for i in range(shape.bookies_per_rack)
                    ],
                }
                for k, rack in enumerate("abcdefgh"[: shape.racks])
            ]
            regions.append(
                {
                    "name": region,
                    "racks": racks,
                    "write_proxies": [
                        {"name": f"wp-{region}", "host": f"127.0.{r + 1}.200", "port": 8100}
                    ],
                    "read_proxies": [
                        {"name": f"rp-{region}", "host": f"127.0.{r + 1}.201", "port": 8200}
                    ],
                }
            )
        return {
            "name": "simulation",
            "replication": {
                "ensemble_size": shape.ensemble_size,
                "write_quorum": shape.write_quorum,
                "ack_quorum": shape.ack_quorum,
                "min_regions_for_durability": shape.min_regions_for_durability,
            },
            "zookeeper": [
                {
                    "name": f"zk-{region}",
                    "region": region,
                    "host": f"127.0.{r + 1}.250",
                    "client_port": 2181,
                    "peer_port": 2888,
                    "election_port": 3888,
                }
                for r, region in enumerate(shape.regions)
            ],
            "regions": regions,
            "security": {"tokens": False, "tls": False},
        }

    def add_host(self, name: str, region: str) -> Host:
        """A host for a client or a proxy of the simulation, at an address of its own."""
        self._ips += 1
        return self.loop.add_host(name, region, f"127.0.240.{self._ips}")

    async def start(self) -> None:
        """Initialises the metadata (BookKeeper's layout, the published topology) and starts
        every bookie; returns once each one is registered."""

        async def initialise() -> None:
            store = await SimMetaStore.connect(self.ensemble)
            await init_cluster_metadata(store)
            published = encode_published(publish_topology(self.topology))
            await store.create(TOPOLOGY_ZNODE, published, make_parents=True)
            await store.close()

        await self.loop.spawn(self._admin, initialise())
        for node in self.bookies.values():
            self.start_bookie(node)
        await asyncio.gather(*(self._wait_registered(n) for n in self.bookies.values()))

    def start_bookie(self, node: SimBookieNode) -> None:
        """The bookie process starts (again): it listens, then registers in ZooKeeper."""
        node.server.start()

        async def register() -> None:
            store = await SimMetaStore.connect(self.ensemble, session_timeout_s=BOOKIE_SESSION_S)
            await store.create(f"{AVAILABLE}/{node.bookie_id}", ephemeral=True)
            await asyncio.get_running_loop().create_future()  # the session lives with the process

        node.registered = self.loop.spawn(node.host, register(), name=f"{node.host.name}-registry")

    async def _wait_registered(self, node: SimBookieNode) -> None:
        path = f"{AVAILABLE}/{node.bookie_id}"
        registered = asyncio.Event()
        stop = self.ensemble.watch(AVAILABLE, registered.set)
        try:
            while self.ensemble.state.exists(path) is None:
                registered.clear()
                await registered.wait()
        finally:
            stop()

    def crash_bookie(self, name: str, *, machine_up: bool = True) -> None:
        self.loop.crash(self.bookies[name].host, machine_up=machine_up)

    def restart_bookie(self, name: str, *, wiped: bool = False) -> None:
        node = self.bookies[name]
        self.loop.restart(node.host)
        if wiped:
            node.server.wipe()
        self.start_bookie(node)
