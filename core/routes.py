"""WAN routes: which address each region uses to reach each bookie, and the published topology.

Traffic between regions goes through one emulated WAN link (a toxiproxy proxy) per
(source region, remote bookie); traffic inside a region goes straight to the bookie.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from core.errors import MetadataError
from core.topology import Bookie, Endpoint, Topology

TOPOLOGY_ZNODE = "/globelog/topology"  # where `cluster up` publishes it for every client
PUBLISHED_FORMAT_VERSION = 1
PUBLISHED_BYTES_MAX = 1 << 20


@dataclass(frozen=True, slots=True)
class Route:
    """One WAN link: clients in `from_region` reach `bookie` at `listen`."""

    name: str
    from_region: str
    bookie: Bookie
    listen: Endpoint

    @property
    def to_region(self) -> str:
        return self.bookie.region


def plan_routes(topology: Topology) -> list[Route]:
    """Every cross-region route, with deterministic listen ports from `listen_port_base`."""
    routes: list[Route] = []
    port = topology.wan.listen_port_base
    host = topology.wan.toxiproxy.host
    for region in topology.region_names:
        for bookie in topology.bookies:
            if bookie.region == region:
                continue
            name = f"{region}--{bookie.name}"
            routes.append(Route(name, region, bookie, Endpoint(host, port)))
            port += 1
    return routes


@dataclass(frozen=True, slots=True)
class PublishedBookie:
    bookie_id: str
    name: str
    region: str
    rack: str


@dataclass(frozen=True, slots=True)
class PublishedTopology:
    """What every client reads from ZooKeeper: bookie locations and per-region addresses."""

    name: str
    regions: tuple[str, ...]
    bookies: tuple[PublishedBookie, ...]
    addresses: dict[str, dict[str, str]]  # region -> bookie id -> "host:port" to dial

    def address(self, from_region: str, bookie_id: str) -> str:
        """The address a client in `from_region` dials for `bookie_id` (direct if unknown)."""
        return self.addresses.get(from_region, {}).get(bookie_id, bookie_id)

    def location(self, bookie_id: str) -> PublishedBookie | None:
        for bookie in self.bookies:
            if bookie.bookie_id == bookie_id:
                return bookie
        return None


def publish_topology(topology: Topology) -> PublishedTopology:
    routes = {(r.from_region, r.bookie.bookie_id): r.listen.address for r in plan_routes(topology)}
    addresses = {
        region: {
            b.bookie_id: routes.get((region, b.bookie_id), b.bookie_id) for b in topology.bookies
        }
        for region in topology.region_names
    }
    bookies = tuple(
        PublishedBookie(b.bookie_id, b.name, b.region, b.rack) for b in topology.bookies
    )
    return PublishedTopology(topology.name, topology.region_names, bookies, addresses)


def encode_published(published: PublishedTopology) -> bytes:
    document = {
        "format_version": PUBLISHED_FORMAT_VERSION,
        "name": published.name,
        "regions": list(published.regions),
        "bookies": [
            {"id": b.bookie_id, "name": b.name, "region": b.region, "rack": b.rack}
            for b in published.bookies
        ],
        "addresses": published.addresses,
    }
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
        return PublishedTopology(
            str(document["name"]), tuple(document["regions"]), bookies, addresses
        )
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise MetadataError(f"{where}: not a published topology: {err!r}") from err
