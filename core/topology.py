"""The topology model: regions, racks, bookies, proxies, ZooKeeper nodes and the WAN matrix.

Frozen dataclasses built once by `core.topology_loader`; nothing here does IO.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.errors import ConfigError
from core.security.settings import SecuritySettings
from core.settings.limits import ProxyLimits
from core.settings.rebuild_settings import RebuildSettings
from core.streams import StreamSettings


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Bookie:
    """One BookKeeper bookie and its failure domains."""

    name: str
    region: str
    rack: str
    endpoint: Endpoint

    @property
    def bookie_id(self) -> str:
        """The id the bookie registers under in ZooKeeper (host:port)."""
        return self.endpoint.address

    @property
    def location(self) -> str:
        """Network location in BookKeeper's `/region/rack` form."""
        return f"/{self.region}/{self.rack}"


@dataclass(frozen=True, slots=True)
class Rack:
    name: str
    bookies: tuple[Bookie, ...]


@dataclass(frozen=True, slots=True)
class Proxy:
    """A write or read proxy: a globelog service bound to one region."""

    name: str
    region: str
    endpoint: Endpoint


@dataclass(frozen=True, slots=True)
class Region:
    name: str
    racks: tuple[Rack, ...]
    write_proxies: tuple[Proxy, ...]
    read_proxies: tuple[Proxy, ...]
    consoles: tuple[Proxy, ...] = ()  # web consoles (`globelog serve console`)

    @property
    def bookies(self) -> tuple[Bookie, ...]:
        return tuple(b for rack in self.racks for b in rack.bookies)


@dataclass(frozen=True, slots=True)
class ZkNode:
    """One ZooKeeper server of the global ensemble; `server_id` is its myid."""

    name: str
    region: str
    server_id: int
    client: Endpoint
    peer_port: int
    election_port: int


@dataclass(frozen=True, slots=True)
class WanLink:
    """Emulated one-way latency between two regions (applied in each direction)."""

    region_a: str
    region_b: str
    one_way_ms: float
    jitter_ms: float


@dataclass(frozen=True, slots=True)
class Wan:
    toxiproxy: Endpoint
    listen_port_base: int
    default_profile: str
    profiles: dict[str, tuple[WanLink, ...]] = field(hash=False)

    def link(self, profile: str, region_a: str, region_b: str) -> WanLink:
        for link in self.profiles[profile]:
            if {link.region_a, link.region_b} == {region_a, region_b}:
                return link
        raise KeyError(f"no WAN link {region_a}<->{region_b} in profile {profile!r}")


@dataclass(frozen=True, slots=True)
class Replication:
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    min_regions_for_durability: int


@dataclass(frozen=True, slots=True)
class Topology:
    name: str
    replication: Replication
    zookeeper: tuple[ZkNode, ...]
    regions: tuple[Region, ...]
    wan: Wan | None  # the local launcher's WAN emulation; a real deployment has none
    streams: StreamSettings = field(
        default_factory=StreamSettings
    )  # writer defaults (topology.yaml `streams:`)
    archive_uri: str | None = None  # tiered storage (topology.yaml `archive:`), docs/spark.md
    limits: ProxyLimits = field(default_factory=ProxyLimits)  # topology.yaml `limits:`
    rebuild: RebuildSettings = field(default_factory=RebuildSettings)  # `rebuild:`
    security: SecuritySettings = field(default_factory=SecuritySettings)  # `security:`

    @property
    def bookies(self) -> tuple[Bookie, ...]:
        return tuple(b for region in self.regions for b in region.bookies)

    @property
    def emulated_wan(self) -> Wan:
        """The `wan:` section, which only the local launcher and its tools use."""
        if self.wan is None:
            raise ConfigError(
                f"topology {self.name!r} has no wan: section; the local cluster emulates the "
                "WAN with toxiproxy and needs one (docs/cluster.md)"
            )
        return self.wan

    def hosts(self) -> list[tuple[str, str]]:
        """(what, host) for every address of the topology, in file order."""
        found = [(f"zookeeper node {n.name}", n.client.host) for n in self.zookeeper]
        for region in self.regions:
            found += [(f"bookie {b.name}", b.endpoint.host) for b in region.bookies]
            for kind, proxies in (("write", region.write_proxies), ("read", region.read_proxies)):
                found += [(f"{kind} proxy {p.name}", p.endpoint.host) for p in proxies]
            found += [(f"console {c.name}", c.endpoint.host) for c in region.consoles]
        if self.wan is not None:
            found.append(("wan.toxiproxy", self.wan.toxiproxy.host))
        return found

    @property
    def region_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.regions)

    def proxy_url(self, proxy: Proxy) -> str:
        """Where clients reach `proxy`: HTTPS unless the deployment turned TLS off."""
        return f"{self.security.scheme}://{proxy.endpoint.host}:{proxy.endpoint.port}"

    @property
    def proxy_hosts(self) -> tuple[str, ...]:
        """Every host a proxy (or a console) of the topology runs on."""
        hosts = {
            p.endpoint.host
            for r in self.regions
            for p in r.write_proxies + r.read_proxies + r.consoles
        }
        return tuple(sorted(hosts))

    @property
    def tls_hosts(self) -> tuple[str, ...]:
        """Every host that serves TLS (proxies, bookies, ZooKeeper nodes): each needs a
        certificate."""
        bookies = (b.endpoint.host for b in self.bookies)
        nodes = (n.client.host for n in self.zookeeper)
        return tuple(sorted({*self.proxy_hosts, *bookies, *nodes}))

    def region(self, name: str) -> Region:
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(f"no region {name!r}; regions are {list(self.region_names)}")

    def bookie(self, name_or_id: str) -> Bookie:
        for bookie in self.bookies:
            if name_or_id in (bookie.name, bookie.bookie_id):
                return bookie
        raise KeyError(f"no bookie {name_or_id!r}")

    @property
    def zk_connect(self) -> str:
        """The ZooKeeper connect string for the whole ensemble."""
        return ",".join(node.client.address for node in self.zookeeper)

    def zk_nodes_for(self, region: str) -> tuple[ZkNode, ...]:
        """The ZooKeeper nodes a process of `region` talks to: its region's, else all of them."""
        local = tuple(node for node in self.zookeeper if node.region == region)
        return local or self.zookeeper

    def zk_connect_for(self, region: str) -> str:
        """The connect string of a process in `region`: its own region's ZooKeeper nodes.

        As in a deployment, a region's clients do not cross the WAN to reach ZooKeeper; a
        region cut off from the quorum loses its sessions.
        """
        return ",".join(node.client.address for node in self.zk_nodes_for(region))
