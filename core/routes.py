"""WAN routes: which address each region uses to reach each bookie and ZooKeeper peer.

Traffic between regions goes through one emulated WAN link (a toxiproxy proxy) per
(source region, remote bookie) and per (source region, remote ZooKeeper node, port: quorum,
election, client); traffic inside a region goes straight to its target. Clients talk to their
own region's ZooKeeper nodes first, and cross the WAN to another region's node when theirs stops
serving them (`zk_hosts_for`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from core.errors import MetadataError
from core.topology import Endpoint, Replication, Topology

TOPOLOGY_ZNODE = "/globelog/topology"  # where `cluster up` publishes it for every client
PUBLISHED_FORMAT_VERSION = 1
PUBLISHED_BYTES_MAX = 1 << 20


ROUTE_KINDS = ("bookie", "zk-peer", "zk-election", "zk-client")


@dataclass(frozen=True, slots=True)
class Route:
    """One WAN link: processes in `from_region` reach `upstream` (of `target`) at `listen`."""

    name: str
    kind: str  # one of ROUTE_KINDS
    target: str  # the bookie's or ZooKeeper node's topology name
    from_region: str
    to_region: str
    upstream: Endpoint
    listen: Endpoint


def plan_routes(topology: Topology) -> list[Route]:
    """Every cross-region route, with deterministic listen ports from `listen_port_base`.

    Bookie routes come first and keep their ports whatever the ZooKeeper section says. A
    route to a ZooKeeper node's peer (leader) port ends at the node's peer relay (see
    `peer_relays`), not at the port itself. A topology without a `wan:` section (a real
    deployment) has no routes: every process dials every other directly.
    """
    if topology.wan is None:
        return []
    host = topology.wan.toxiproxy.host
    targets = [("bookie", b.name, b.region, b.endpoint) for b in topology.bookies]
    relays = {relay.node: relay.listen for relay in peer_relays(topology)}
    for node in topology.zookeeper:
        peer = relays[node.name]
        election = Endpoint(node.client.host, node.election_port)
        targets += [("zk-peer", node.name, node.region, peer)]
        targets += [("zk-election", node.name, node.region, election)]
        targets += [("zk-client", node.name, node.region, node.client)]
    routes: list[Route] = []
    port = topology.wan.listen_port_base
    for wanted in ROUTE_KINDS:
        for region in topology.region_names:
            for kind, target, to_region, upstream in targets:
                if kind != wanted or to_region == region:
                    continue
                suffix = "" if kind == "bookie" else "-" + kind.removeprefix("zk-")
                name = f"{region}--{target}{suffix}"
                listen = Endpoint(host, port)
                routes.append(Route(name, kind, target, region, to_region, upstream, listen))
                port += 1
    return routes


@dataclass(frozen=True, slots=True)
class PeerRelay:
    """Forwards WAN connections to a ZooKeeper node's peer port, retrying the connect.

    A ZooKeeper follower connects to its new leader's peer port the moment it decides to
    follow, which can be a WAN one-way delay before the leader opens that port. Directly, the
    connect is refused and the follower retries; through the WAN emulator it is accepted and
    then closed, which the follower takes as a failed leader: it starts another election
    while the leader waits for it, and the two can miss each other for as long as the
    region stays down. The relay, in the node's own region, waits for the port instead.
    """

    node: str  # the ZooKeeper node's topology name
    region: str
    listen: Endpoint
    upstream: Endpoint  # the node's peer port


def peer_relays(topology: Topology) -> list[PeerRelay]:
    """One relay per ZooKeeper node, on the ports after every WAN route's (none without a
    WAN emulation)."""
    if topology.wan is None:
        return []
    host = topology.wan.toxiproxy.host
    regions = len(topology.region_names)
    routes = regions * len(topology.bookies) - len(topology.bookies)
    routes += (len(ROUTE_KINDS) - 1) * sum(regions - 1 for _ in topology.zookeeper)
    port = topology.wan.listen_port_base + routes
    return [
        PeerRelay(
            node.name, node.region, Endpoint(host, port + i),
            Endpoint(node.client.host, node.peer_port),
        )
        for i, node in enumerate(topology.zookeeper)
    ]  # fmt: skip


def route_to(routes: list[Route], from_region: str, kind: str, target: str) -> Route | None:
    """The route processes in `from_region` take to `target`, None when it is local."""
    for route in routes:
        if (route.from_region, route.kind, route.target) == (from_region, kind, target):
            return route
    return None


def zk_hosts_for(topology: Topology, region: str) -> str:
    """The connect string of a process in `region`, in the order it tries them: its region's
    ZooKeeper nodes, then every other region's as `region` reaches them (through the WAN
    emulator where there is one).

    A client connects to its own region's node first. When that node stops serving (it lost
    the leader: a cut between its region and the leader's), the client carries its session
    over to a node that still follows the leader before the session's timeout runs out,
    instead of losing the session and every stream it owns with it; only a region cut off
    from every other loses its sessions. (kazoo moves down the list from the node that
    dropped it and starts again at the top only after the last: a store made with its region
    brings a session that moved back home once its node serves, global_meta.homing.)
    """
    routes = plan_routes(topology)
    local = topology.zk_nodes_for(region)
    hosts = [node.client.address for node in local]
    for node in topology.zookeeper:
        if node in local:
            continue
        route = route_to(routes, region, "zk-client", node.name)
        hosts.append(node.client.address if route is None else route.listen.address)
    return ",".join(hosts)


@dataclass(frozen=True, slots=True)
class PublishedBookie:
    bookie_id: str
    name: str
    region: str
    rack: str


@dataclass(frozen=True, slots=True)
class PublishedTopology:
    """What every client reads from ZooKeeper: bookie locations and per-region addresses,
    the replication new ledgers take, and the regions being drained (no new copies there).

    `globelog region add|remove` republishes it while the system runs (membership/); a
    document without `replication` or `drained` (written before they existed) has none.
    """

    name: str
    regions: tuple[str, ...]
    bookies: tuple[PublishedBookie, ...]
    addresses: dict[str, dict[str, str]]  # region -> bookie id -> "host:port" to dial
    replication: Replication | None = None  # new ledgers' E/W/A and rule; None: the file's
    drained: tuple[str, ...] = ()  # regions that take no new copies (a removal under way)

    def without_region(self, region: str) -> PublishedTopology:
        """This publication with `region`, its bookies and its dial addresses gone; the other
        regions keep their addresses (an emulated WAN's ports included)."""
        gone = {b.bookie_id for b in self.bookies if b.region == region}
        addresses = {
            r: {b: a for b, a in t.items() if b not in gone} for r, t in self.addresses.items()
        }
        return PublishedTopology(
            self.name,
            tuple(r for r in self.regions if r != region),
            tuple(b for b in self.bookies if b.region != region),
            {r: table for r, table in addresses.items() if r != region},
            self.replication,
            tuple(r for r in self.drained if r != region),
        )

    def draining(self, region: str, drained: bool = True) -> PublishedTopology:
        """This publication with `region` drained (or no longer drained)."""
        others = tuple(r for r in self.drained if r != region)
        return dataclasses.replace(self, drained=(*others, region) if drained else others)

    def address(self, from_region: str, bookie_id: str) -> str:
        """The address a client in `from_region` dials for `bookie_id` (direct if unknown)."""
        return self.addresses.get(from_region, {}).get(bookie_id, bookie_id)

    def location(self, bookie_id: str) -> PublishedBookie | None:
        for bookie in self.bookies:
            if bookie.bookie_id == bookie_id:
                return bookie
        return None


def publish_topology(topology: Topology, drained: tuple[str, ...] = ()) -> PublishedTopology:
    routes = {
        (r.from_region, r.upstream.address): r.listen.address
        for r in plan_routes(topology)
        if r.kind == "bookie"
    }
    addresses = {
        region: {
            b.bookie_id: routes.get((region, b.bookie_id), b.bookie_id) for b in topology.bookies
        }
        for region in topology.region_names
    }
    bookies = tuple(
        PublishedBookie(b.bookie_id, b.name, b.region, b.rack) for b in topology.bookies
    )
    return PublishedTopology(
        topology.name,
        topology.region_names,
        bookies,
        addresses,
        topology.replication,
        tuple(r for r in drained if r in topology.region_names),
    )


def encode_published(published: PublishedTopology) -> bytes:
    document: dict[str, Any] = {
        "format_version": PUBLISHED_FORMAT_VERSION,
        "name": published.name,
        "regions": list(published.regions),
        "bookies": [
            {"id": b.bookie_id, "name": b.name, "region": b.region, "rack": b.rack}
            for b in published.bookies
        ],
        "addresses": published.addresses,
        "drained": list(published.drained),
    }
    if published.replication is not None:
        document["replication"] = dataclasses.asdict(published.replication)
    return json.dumps(document, sort_keys=True, indent=1).encode()


def decode_published(data: bytes, where: str) -> PublishedTopology:
    """Parses the published topology; anything malformed raises MetadataError naming `where`."""
    if len(data) > PUBLISHED_BYTES_MAX:
        raise MetadataError(f"{where}: {len(data)} bytes; the limit is {PUBLISHED_BYTES_MAX}")
    try:
        document: Any = json.loads(data)
        version = document["format_version"]
        if version != PUBLISHED_FORMAT_VERSION:
            raise MetadataError(
                f"{where}: format_version {version!r}; expected {PUBLISHED_FORMAT_VERSION}"
            )
        bookies = tuple(
            PublishedBookie(str(b["id"]), str(b["name"]), str(b["region"]), str(b["rack"]))
            for b in document["bookies"]
        )
        addresses = {
            str(region): {str(k): str(v) for k, v in table.items()}
            for region, table in document["addresses"].items()
        }
        replication = document.get("replication")
        return PublishedTopology(
            str(document["name"]),
            tuple(str(r) for r in document["regions"]),
            bookies,
            addresses,
            None if replication is None else _replication(replication),
            tuple(str(r) for r in document.get("drained", ())),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise MetadataError(f"{where}: not a published topology: {err!r}") from err


def _replication(value: Any) -> Replication:
    numbers = [value[f.name] for f in dataclasses.fields(Replication)]
    if not all(type(n) is int and n > 0 for n in numbers):
        raise ValueError(f"replication {value!r}: expected positive integers")
    return Replication(*numbers)
