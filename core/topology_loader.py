"""Parses topology.yaml into `core.topology` dataclasses, reporting every problem at once.

Each problem names its YAML path, what was received and what was expected:
`regions[1].racks[0].bookies[0].port: expected an integer 1..65535, got 70000`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from core.durability import (
    quorum_problems,
    region_losses_survived,
    replication_surviving_a_region,
)
from core.errors import TopologyError
from core.security.settings import parse_security
from core.settings.limits_loader import parse_limits
from core.settings.rebuild_settings import parse_rebuild
from core.settings.stream_settings_loader import parse_streams
from core.topology import (
    Bookie,
    Endpoint,
    Proxy,
    Rack,
    Region,
    Replication,
    Topology,
    Wan,
    WanLink,
    ZkNode,
)

T = TypeVar("T")
FILE_BYTES_MAX = 1 << 20  # a topology is a few KiB; refuse anything absurd before parsing it
EXPANDED_VALUES_MAX = 100_000  # values once aliases are expanded (a topology has hundreds)
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_")
DNS_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")


class _Problems:
    """Collects problems; typed getters record a problem and return None instead of raising."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(f"{path}: {message}" if path else message)

    def mapping(self, node: Any, path: str, keys: set[str]) -> dict[str, Any] | None:
        if not isinstance(node, dict):
            self.add(path, f"expected a mapping, got {_show(node)}")
            return None
        for key in sorted(set(node) - keys, key=str):
            self.add(_join(path, str(key)), f"unknown key; expected one of {sorted(keys)}")
        return node

    def seq(self, node: Any, path: str, min_len: int = 0) -> list[Any]:
        if not isinstance(node, list):
            self.add(path, f"expected a list, got {_show(node)}")
            return []
        if len(node) < min_len:
            self.add(path, f"expected at least {min_len} item(s), got {len(node)}")
        return node

    def get(
        self,
        node: dict[str, Any],
        key: str,
        path: str,
        check: Callable[[Any], T | None],
        expected: str,
        default: Any = None,
    ) -> T | None:
        where = _join(path, key)
        if key not in node:
            if default is not None:
                return check(default)
            self.add(where, f"missing; expected {expected}")
            return None
        value = check(node[key])
        if value is None:
            self.add(where, f"expected {expected}, got {_show(node[key])}")
        return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _name(value: Any) -> str | None:
    if isinstance(value, str) and value and set(value) <= NAME_CHARS and len(value) <= 64:
        return value
    return None


def _host(value: Any) -> str | None:
    """A DNS name or an IPv4 address, lower-cased; `localhost` is 127.0.0.1."""
    if not isinstance(value, str) or not value or len(value) > 253:
        return None
    host = value.lower()
    if host == "localhost":
        return "127.0.0.1"
    labels = host.split(".")
    if all(label.isdigit() for label in labels):
        # Dotted numbers are an IPv4 address or nothing: "10.1.2" is not a host name.
        if len(labels) == 4 and all(len(x) <= 3 and int(x) <= 255 for x in labels):
            return None if host == "0.0.0.0" else host
        return None
    if all(_dns_label(label) for label in labels):
        return host
    return None


def _dns_label(label: str) -> bool:
    return (
        0 < len(label) <= 63
        and set(label) <= DNS_CHARS
        and not label.startswith("-")
        and not label.endswith("-")
    )


def is_loopback(host: str) -> bool:
    """True for the hosts the local launcher accepts: 127.x.y.z (localhost is read as one)."""
    parts = host.split(".")
    return len(parts) == 4 and parts[0] == "127" and all(p.isdigit() for p in parts)


def local_problems(topology: Topology) -> list[str]:
    """Why the local launcher cannot run `topology` (empty when it can)."""
    problems = [
        f"{what}: host {host!r} is not a loopback address; the local cluster runs every "
        "process on this machine and keeps its traffic on loopback, so it takes 127.x.y.z "
        "or localhost only"
        for what, host in topology.hosts()
        if not is_loopback(host)
    ]
    if topology.wan is None:
        problems.append(
            "wan: missing; the local cluster emulates the WAN between its regions with "
            "toxiproxy and needs the wan: section (docs/cluster.md)"
        )
    if problems:
        problems.append(
            "a topology of real hosts is deployed host by host with `globelog config`, "
            "`globelog init` and `globelog serve` (docs/deploy.md)"
        )
    return problems


def require_local(topology: Topology, source: str) -> None:
    """Raises TopologyError when the local launcher (`globelog cluster`, tests, the demo)
    cannot run `topology`."""
    problems = local_problems(topology)
    if problems:
        raise TopologyError(source, problems)


def _port(value: Any) -> int | None:
    return value if type(value) is int and 1 <= value <= 65535 else None


def _positive_int(value: Any) -> int | None:
    return value if type(value) is int and value >= 1 else None


def _whole_ms(value: Any) -> float | None:
    # The WAN emulator (toxiproxy) delays in whole milliseconds.
    if type(value) in (int, float) and 0 <= value <= 10_000 and float(value).is_integer():
        return float(value)
    return None


NAME = "a name of 1-64 characters from [a-z0-9-_]"
HOST = "a DNS name or an IPv4 address (IPv6 literals are not supported; name the host)"
PORT = "an integer 1..65535"


def parse_topology(text: str, source: str = "<topology>") -> Topology:
    """Parses YAML text into a Topology or raises TopologyError listing every problem."""
    problems = _Problems()
    try:
        expanded = _expanded_size(yaml.compose(text, Loader=yaml.SafeLoader))
        if expanded > EXPANDED_VALUES_MAX:
            # aliases (*name) reuse a value; nested, a few lines stand for billions of values
            raise TopologyError(
                source,
                [
                    f"the document expands to more than {EXPANDED_VALUES_MAX} values through "
                    "its aliases (&anchor / *alias); a topology has hundreds"
                ],
            )
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise TopologyError(source, [f"not valid YAML: {err}"]) from err
    except RecursionError as err:
        raise TopologyError(
            source, ["values nested deeper than the parser can follow; a topology is shallow"]
        ) from err
    topology = _parse_document(document, problems)
    if problems.items or topology is None:
        raise TopologyError(source, problems.items)
    return topology


def _expanded_size(root: yaml.Node | None) -> int:
    """How many values the document has once every alias is expanded, counted over the
    node graph (an aliased node is one shared object) in time linear in its size."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = 1  # a cycle (a recursive alias) counts once, then stops
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        total = min(total, EXPANDED_VALUES_MAX + 1)
        sizes[id(node)] = total
        return total

    return 0 if root is None else size(root)


def load_topology(path: str | Path) -> Topology:
    """Reads and parses a topology file."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > FILE_BYTES_MAX:
            raise TopologyError(str(file), [f"file is {size} bytes; the limit is {FILE_BYTES_MAX}"])
        text = file.read_text(encoding="utf-8")
    except OSError as err:
        raise TopologyError(str(file), [f"cannot read the file: {err.strerror}"]) from err
    except UnicodeDecodeError as err:
        raise TopologyError(str(file), [f"not UTF-8 text: {err}"]) from err
    topology = parse_topology(text, str(file))
    if topology.archive_uri is not None and not _has_scheme(topology.archive_uri):
        # A relative archive directory lives beside the topology file that names it.
        uri = str((file.parent / topology.archive_uri).resolve())
        topology = dataclasses.replace(topology, archive_uri=uri)
    # so is a relative security directory
    return dataclasses.replace(topology, security=topology.security.beside(file))


TOP_KEYS = {
    "name",
    "replication",
    "zookeeper",
    "regions",
    "wan",
    "streams",
    "limits",
    "rebuild",
    "archive",
    "security",
}


def _parse_document(document: Any, p: _Problems) -> Topology | None:
    root = p.mapping(document, "", TOP_KEYS)
    if root is None:
        return None
    name = p.get(root, "name", "", _name, NAME)
    regions = _parse_regions(root.get("regions"), p)
    region_names = [r.name for r in regions]
    replication = _parse_replication(root.get("replication"), p, regions)
    zookeeper = _parse_zookeeper(root.get("zookeeper"), p, set(region_names))
    # Only the local launcher emulates a WAN; a deployment's topology leaves it out.
    wan = None if root.get("wan") is None else _parse_wan(root["wan"], p, region_names)
    streams = parse_streams(root.get("streams"), p)
    limits = parse_limits(root.get("limits"), p)
    rebuild = parse_rebuild(root.get("rebuild"), p)
    security = parse_security(root.get("security"), p)
    archive_uri = _parse_archive(root.get("archive"), p)
    _check_unique_addresses(regions, zookeeper, wan, p)
    if None in (name, replication, streams, limits, rebuild, security) or p.items:
        return None
    assert name is not None and replication is not None and security is not None
    assert streams is not None and limits is not None and rebuild is not None
    return Topology(
        name,
        replication,
        tuple(zookeeper),
        tuple(regions),
        wan,
        streams,
        archive_uri,
        limits,
        rebuild,
        security,
    )


def _parse_archive(node: Any, p: _Problems) -> str | None:
    """`archive: {uri: ...}`: where `globelog spark archive` copies completed segments."""
    if node is None:
        return None
    m = p.mapping(node, "archive", {"uri"})
    if m is None:
        return None
    uri = m.get("uri")
    if not isinstance(uri, str) or not uri.strip():
        p.add(
            "archive.uri",
            f"expected a directory or a Hadoop filesystem URI (file:, hdfs:, s3a:, ...), "
            f"got {uri!r}",
        )
        return None
    return uri.strip()


def _has_scheme(uri: str) -> bool:
    scheme, sep, _ = uri.partition("://")
    return bool(sep) and scheme.replace("+", "").isalnum()


REPLICATION_KEYS = {"ensemble_size", "write_quorum", "ack_quorum", "min_regions_for_durability"}


def _parse_replication(node: Any, p: _Problems, regions: list[Region]) -> Replication | None:
    m = p.mapping(node, "replication", REPLICATION_KEYS)
    if m is None:
        return None
    values = {
        k: p.get(m, k, "replication", _positive_int, "an integer >= 1")
        for k in ("ensemble_size", "write_quorum", "ack_quorum", "min_regions_for_durability")
    }
    if any(v is None for v in values.values()):
        return None
    e, w, a, r = (int(v) for v in values.values() if v is not None)
    if regions:
        for problem in quorum_problems(e, w, a, r, len(regions)):
            p.add("replication", problem)
        bookies = sum(len(region.bookies) for region in regions)
        if e > bookies:
            p.add(
                "replication.ensemble_size", f"is {e} but the topology has only {bookies} bookies"
            )
    return Replication(e, w, a, r)


def region_loss_summary(topology: Topology) -> str:
    """A sentence on how many region losses writes survive (for status output)."""
    rep = topology.replication
    survived = region_losses_survived(
        rep.ensemble_size,
        rep.write_quorum,
        rep.ack_quorum,
        rep.min_regions_for_durability,
        [len(region.bookies) for region in topology.regions],
    )
    return (
        f"E/W/A {rep.ensemble_size}/{rep.write_quorum}/{rep.ack_quorum}, "
        f"min_regions_for_durability={rep.min_regions_for_durability}: writes keep the "
        f"rule with up to {max(survived, 0)} of {len(topology.regions)} regions down"
    )


def region_loss_warning(topology: Topology) -> str | None:
    """A warning when losing some one region would stop writes, naming settings that would
    not; None when the settings write through the loss of any one region."""
    rep = topology.replication
    bookies = [len(region.bookies) for region in topology.regions]
    min_regions = rep.min_regions_for_durability
    settings = (rep.ensemble_size, rep.write_quorum, rep.ack_quorum, min_regions)
    if region_losses_survived(*settings, bookies) >= 1:
        return None
    message = (
        f"warning: replication E/W/A {rep.ensemble_size}/{rep.write_quorum}/{rep.ack_quorum} "
        f"with min_regions_for_durability={min_regions} over {bookies} bookies per region "
        "cannot write through the loss of one region"
    )
    better = replication_surviving_a_region(min_regions, bookies)
    if better is not None:
        e, w, a = better
        return f"{message}; E/W/A {e}/{w}/{a} with min_regions_for_durability={min_regions} can"
    fewer = replication_surviving_a_region(min_regions - 1, bookies) if min_regions > 2 else None
    if fewer is not None:
        e, w, a = fewer
        return (
            f"{message}; no E/W/A can with these bookies, E/W/A {e}/{w}/{a} with "
            f"min_regions_for_durability={min_regions - 1} can"
        )
    return f"{message}; add bookies (at least two per region) or regions"


REGION_KEYS = {"name", "racks", "write_proxies", "read_proxies", "consoles"}
ENDPOINT_KEYS = {"name", "host", "port"}


def _parse_regions(node: Any, p: _Problems) -> list[Region]:
    regions: list[Region] = []
    seen: set[str] = set()
    for i, item in enumerate(p.seq(node, "regions", min_len=1)):
        path = f"regions[{i}]"
        m = p.mapping(item, path, REGION_KEYS)
        if m is None:
            continue
        name = p.get(m, "name", path, _name, NAME)
        if name is not None and name in seen:
            p.add(f"{path}.name", f"duplicate region name {name!r}")
        seen.add(name or "")
        racks = _parse_racks(m.get("racks"), f"{path}.racks", p, name or "?")
        writers = _parse_proxies(m.get("write_proxies"), f"{path}.write_proxies", p, name or "?")
        readers = _parse_proxies(m.get("read_proxies", []), f"{path}.read_proxies", p, name or "?")
        consoles = _parse_proxies(m.get("consoles", []), f"{path}.consoles", p, name or "?", 0)
        if name is not None:
            regions.append(
                Region(name, tuple(racks), tuple(writers), tuple(readers), tuple(consoles))
            )
    return regions


def _parse_racks(node: Any, path: str, p: _Problems, region: str) -> list[Rack]:
    racks: list[Rack] = []
    seen: set[str] = set()
    for i, item in enumerate(p.seq(node, path, min_len=1)):
        rpath = f"{path}[{i}]"
        m = p.mapping(item, rpath, {"name", "bookies"})
        if m is None:
            continue
        name = p.get(m, "name", rpath, _name, NAME)
        if name is not None and name in seen:
            p.add(f"{rpath}.name", f"duplicate rack name {name!r} in region {region!r}")
        seen.add(name or "")
        bookies = []
        for j, entry in enumerate(p.seq(m.get("bookies"), f"{rpath}.bookies", min_len=1)):
            endpoint = _parse_endpoint(entry, f"{rpath}.bookies[{j}]", p)
            if endpoint is not None and name is not None:
                bookies.append(Bookie(endpoint[0], region, name, endpoint[1]))
        if name is not None:
            racks.append(Rack(name, tuple(bookies)))
    return racks


def _parse_proxies(
    node: Any, path: str, p: _Problems, region: str, min_len: int = 1
) -> list[Proxy]:
    proxies = []
    for i, item in enumerate(p.seq(node, path, min_len=min_len)):
        endpoint = _parse_endpoint(item, f"{path}[{i}]", p)
        if endpoint is not None:
            proxies.append(Proxy(endpoint[0], region, endpoint[1]))
    return proxies


def _parse_endpoint(node: Any, path: str, p: _Problems) -> tuple[str, Endpoint] | None:
    m = p.mapping(node, path, ENDPOINT_KEYS)
    if m is None:
        return None
    name = p.get(m, "name", path, _name, NAME)
    host = p.get(m, "host", path, _host, HOST, default="127.0.0.1")
    port = p.get(m, "port", path, _port, PORT)
    if name is None or host is None or port is None:
        return None
    return name, Endpoint(host, port)


ZK_KEYS = {"id", "name", "region", "host", "client_port", "peer_port", "election_port"}
SERVER_ID_MAX = 255  # ZooKeeper's myid range
SERVER_ID = f"an integer 1..{SERVER_ID_MAX}"


def _server_id(value: Any) -> int | None:
    return number if (number := _positive_int(value)) and number <= SERVER_ID_MAX else None


def zookeeper_warning(topology: Topology) -> str | None:
    """A warning for an even number of ZooKeeper nodes (allowed: adding a region passes
    through one), which survives no more losses than one node fewer."""
    count = len(topology.zookeeper)
    if count % 2 or count == 0:
        return None
    return (
        f"warning: {count} ZooKeeper nodes survive the loss of {count // 2 - 1}, as "
        f"{count - 1} would; an odd number makes every node count"
    )


def _parse_zookeeper(node: Any, p: _Problems, regions: set[str]) -> list[ZkNode]:
    nodes: list[ZkNode] = []
    items = p.seq(node, "zookeeper", min_len=1)
    ids: set[int] = set()
    for i, item in enumerate(items):
        path = f"zookeeper[{i}]"
        m = p.mapping(item, path, ZK_KEYS)
        if m is None:
            continue
        name = p.get(m, "name", path, _name, NAME)
        region = p.get(m, "region", path, _name, NAME)
        if region is not None and regions and region not in regions:
            p.add(f"{path}.region", f"unknown region {region!r}; expected one of {sorted(regions)}")
        host = p.get(m, "host", path, _host, HOST, default="127.0.0.1")
        ports = [
            p.get(m, k, path, _port, PORT) for k in ("client_port", "peer_port", "election_port")
        ]
        if None in (name, region, host) or None in ports:
            continue
        assert name is not None and region is not None and host is not None
        client, peer, election = (int(x) for x in ports if x is not None)
        # its myid: given (kept when others leave: membership/plans.py), else its place
        server_id = p.get(m, "id", path, _server_id, SERVER_ID, default=i + 1)
        if server_id in ids:
            p.add(f"{path}.id", f"duplicate server id {server_id}")
        if server_id is None or server_id in ids:
            continue
        ids.add(server_id)
        nodes.append(ZkNode(name, region, server_id, Endpoint(host, client), peer, election))
    return nodes


WAN_KEYS = {"toxiproxy", "listen_port_base", "default_profile", "profiles"}
LINK_KEYS = {"between", "one_way_ms", "jitter_ms"}


def _parse_wan(node: Any, p: _Problems, regions: list[str]) -> Wan | None:
    m = p.mapping(node, "wan", WAN_KEYS)
    if m is None:
        return None
    toxi = p.mapping(m.get("toxiproxy"), "wan.toxiproxy", {"host", "api_port"})
    api = None
    if toxi is not None:
        host = p.get(toxi, "host", "wan.toxiproxy", _host, HOST, default="127.0.0.1")
        port = p.get(toxi, "api_port", "wan.toxiproxy", _port, PORT)
        api = Endpoint(host, port) if host and port else None
    base = p.get(m, "listen_port_base", "wan", _port, PORT)
    default = p.get(m, "default_profile", "wan", _name, NAME)
    profiles: dict[str, tuple[WanLink, ...]] = {}
    given = m.get("profiles")
    pm = p.mapping(given, "wan.profiles", set(given) if isinstance(given, dict) else set())
    for pname, links in (pm or {}).items():
        if _name(pname) is None:
            p.add(f"wan.profiles.{pname}", f"profile name: expected {NAME}")
            continue
        profiles[pname] = tuple(_parse_links(links, f"wan.profiles.{pname}", p, regions))
    if default is not None and pm is not None and default not in profiles:
        p.add(
            "wan.default_profile",
            f"{default!r} is not a profile; expected one of {sorted(profiles)}",
        )
    if api is None or base is None or default is None:
        return None
    return Wan(api, base, default, profiles)


def _parse_links(node: Any, path: str, p: _Problems, regions: list[str]) -> list[WanLink]:
    links: list[WanLink] = []
    covered: set[frozenset[str]] = set()
    for i, item in enumerate(p.seq(node, path)):
        lpath = f"{path}[{i}]"
        m = p.mapping(item, lpath, LINK_KEYS)
        if m is None:
            continue
        pair = m.get("between")
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and all(x in regions for x in pair)
            and pair[0] != pair[1]
        ):
            p.add(
                f"{lpath}.between",
                f"expected two different regions of {regions}, got {_show(pair)}",
            )
            pair = None
        elif frozenset(pair) in covered:
            p.add(f"{lpath}.between", f"duplicate link {pair[0]}<->{pair[1]}")
        else:
            covered.add(frozenset(pair))  # named, so never also reported as missing
        one_way = p.get(m, "one_way_ms", lpath, _whole_ms, "whole milliseconds 0..10000")
        jitter = p.get(m, "jitter_ms", lpath, _whole_ms, "whole milliseconds 0..10000", default=0)
        if one_way is not None and jitter is not None and jitter > one_way:
            p.add(
                f"{lpath}.jitter_ms",
                f"is {jitter} ms, more than one_way_ms={one_way}; expected jitter <= latency",
            )
        if pair is not None and one_way is not None and jitter is not None:
            links.append(WanLink(pair[0], pair[1], one_way, jitter))
    for i, a in enumerate(regions):
        for b in regions[i + 1 :]:
            if frozenset((a, b)) not in covered:
                p.add(path, f"no link between {a!r} and {b!r}; every region pair needs one")
    return links


def _check_unique_addresses(
    regions: list[Region], zookeeper: list[ZkNode], wan: Wan | None, p: _Problems
) -> None:
    seen: dict[str, str] = {}
    names: dict[str, str] = {}

    def claim(address: str, owner: str, kind: str = "address") -> None:
        table = seen if kind == "address" else names
        if address in table:
            p.add(owner, f"{kind} {address} is already used by {table[address]}")
        else:
            table[address] = owner

    for ri, region in enumerate(regions):
        for ki, rack in enumerate(region.racks):
            for bi, bookie in enumerate(rack.bookies):
                where = f"regions[{ri}].racks[{ki}].bookies[{bi}]"
                claim(bookie.endpoint.address, where)
                claim(bookie.name, where, "name")
        for kind in ("write_proxies", "read_proxies", "consoles"):
            for pi, proxy in enumerate(getattr(region, kind)):
                where = f"regions[{ri}].{kind}[{pi}]"
                claim(proxy.endpoint.address, where)
                claim(proxy.name, where, "name")
    for zi, node in enumerate(zookeeper):
        where = f"zookeeper[{zi}]"
        claim(node.client.address, where)
        claim(f"{node.client.host}:{node.peer_port}", where)
        claim(f"{node.client.host}:{node.election_port}", where)
        claim(node.name, where, "name")
    if wan is not None:
        claim(wan.toxiproxy.address, "wan.toxiproxy")
        bookies = sum(len(r.bookies) for r in regions)
        # the WAN routes (core/routes.py: to bookies and to ZooKeeper's client, peer and
        # election ports, from every other region), then a peer relay per ZooKeeper node
        span = (len(regions) - 1) * (bookies + 3 * len(zookeeper)) + len(zookeeper)
        for address, owner in list(seen.items()):
            port = int(address.rsplit(":", 1)[1])
            if wan.listen_port_base <= port < wan.listen_port_base + span:
                p.add(
                    owner,
                    f"port {port} lies in the WAN proxy range "
                    f"{wan.listen_port_base}..{wan.listen_port_base + span - 1}",
                )
