"""Pure planning of the local cluster's processes: their config files and command lines."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from cli.tools import Tools
from core.routes import PeerRelay, peer_relays, plan_routes, route_to
from core.topology import Bookie, Proxy, Topology, ZkNode

ZK_TICK_MS = 200  # short ticks: sessions can be as short as 2 ticks, so tests run fast
ZK_SYNC_LIMIT_TICKS = 10  # a follower cut from the leader stops serving after 2 s
BOOKIE_HEAP = "-Xmx512m"
BOOKIE_DIRECT_MEMORY = "-XX:MaxDirectMemorySize=512m"
LEDGERS_ROOT = "/ledgers"
PROXY_ZK_SESSION_TIMEOUT_S = 1.5  # a dead proxy's streams are taken over after this


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """One process of the cluster: what to write before starting it and how to start it."""

    name: str
    kind: str  # "zookeeper" | "zk-relay" | "bookie" | "toxiproxy" | "write-proxy" | "read-proxy"
    argv: tuple[str, ...]
    log: Path
    files: dict[Path, str] = field(default_factory=dict, hash=False)
    region: str | None = None
    ports: tuple[int, ...] = ()


def zk_dir(data_dir: Path, node: ZkNode) -> Path:
    return data_dir / "zookeeper" / node.name


def bookie_dir(data_dir: Path, bookie: Bookie) -> Path:
    return data_dir / "bookies" / bookie.name


def metadata_service_uri(topology: Topology, region: str | None = None) -> str:
    """BookKeeper's metadata URI: the region's own ZooKeeper nodes, or the whole ensemble."""
    nodes = topology.zookeeper if region is None else topology.zk_nodes_for(region)
    hosts = ";".join(node.client.address for node in nodes)
    return f"zk+hierarchical://{hosts}{LEDGERS_ROOT}"


def quorum_line(topology: Topology, node: ZkNode, peer: ZkNode) -> str:
    """`peer`'s server line as `node` sees it: through the WAN when they are in two regions."""
    routes = plan_routes(topology)
    peer_route = route_to(routes, node.region, "zk-peer", peer.name)
    election_route = route_to(routes, node.region, "zk-election", peer.name)
    if peer_route is None or election_route is None:
        return f"server.{peer.server_id}={peer.client.host}:{peer.peer_port}:{peer.election_port}"
    host = peer_route.listen.host
    return f"server.{peer.server_id}={host}:{peer_route.listen.port}:{election_route.listen.port}"


def zookeeper_spec(topology: Topology, node: ZkNode, data_dir: Path, tools: Tools) -> ProcessSpec:
    home = zk_dir(data_dir, node)
    lines = [
        f"tickTime={ZK_TICK_MS}",
        "initLimit=50",
        f"syncLimit={ZK_SYNC_LIMIT_TICKS}",
        f"dataDir={home / 'data'}",
        f"clientPort={node.client.port}",
        f"clientPortAddress={node.client.host}",
        "admin.enableServer=false",
        "4lw.commands.whitelist=*",
        "maxSessionTimeout=60000",
    ]
    if len(topology.zookeeper) > 1:
        # Each node dials its remote peers through the WAN emulator, so a partition between
        # two regions cuts their quorum traffic too.
        lines += [quorum_line(topology, node, peer) for peer in topology.zookeeper]
    files = {
        home / "zoo.cfg": "\n".join(lines) + "\n",
        home / "data" / "myid": f"{node.server_id}\n",
    }
    argv = (
        tools.java,
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-cp",
        tools.zookeeper_classpath,
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        str(home / "zoo.cfg"),
    )
    ports = (node.client.port, node.peer_port, node.election_port)
    log = data_dir / "logs" / f"{node.name}.log"
    return ProcessSpec(node.name, "zookeeper", argv, log, files, node.region, ports)


def bookie_conf(topology: Topology, bookie: Bookie, data_dir: Path) -> str:
    home = bookie_dir(data_dir, bookie)
    lines = [
        f"bookiePort={bookie.endpoint.port}",
        f"advertisedAddress={bookie.endpoint.host}",
        "listeningInterface=lo",  # bind loopback only
        "allowLoopback=true",
        "useHostNameAsBookieID=false",
        f"journalDirectories={home / 'journal'}",
        f"ledgerDirectories={home / 'ledgers'}",
        f"metadataServiceUri={metadata_service_uri(topology, bookie.region)}",
        "httpServerEnabled=false",
        "zkTimeout=10000",
        # fsync the journal before every ack (BookKeeper's default, stated for benchmarks)
        "journalSyncData=true",
        "journalMaxGroupWaitMSec=1",
        # the machine's disk is shared by every bookie; do not go read-only at 95 %
        "diskUsageThreshold=0.99",
        "diskUsageWarnThreshold=0.98",
    ]
    return "\n".join(lines) + "\n"


def bookie_spec(topology: Topology, bookie: Bookie, data_dir: Path, tools: Tools) -> ProcessSpec:
    conf = bookie_dir(data_dir, bookie) / "bk.conf"
    argv = (
        tools.java,
        BOOKIE_HEAP,
        BOOKIE_DIRECT_MEMORY,
        "-cp",
        tools.bookkeeper_classpath,
        "org.apache.bookkeeper.server.Main",
        "--conf",
        str(conf),
    )
    return ProcessSpec(
        bookie.name,
        "bookie",
        argv,
        data_dir / "logs" / f"{bookie.name}.log",
        {conf: bookie_conf(topology, bookie, data_dir)},
        bookie.region,
        (bookie.endpoint.port,),
    )


def toxiproxy_spec(topology: Topology, data_dir: Path, tools: Tools) -> ProcessSpec:
    api = topology.wan.toxiproxy
    argv = (tools.toxiproxy, "-host", api.host, "-port", str(api.port), "-seed", "7")
    routes = plan_routes(topology)
    ports = (api.port, *(route.listen.port for route in routes))
    log = data_dir / "logs" / "toxiproxy.log"
    return ProcessSpec("toxiproxy", "toxiproxy", argv, log, ports=ports)


def bookie_shell_argv(data_dir: Path, tools: Tools, *args: str) -> tuple[str, ...]:
    """A BookKeeper shell command on this cluster (its conf is written by `up`)."""
    conf = data_dir / "bookies" / "shell.conf"
    shell = "org.apache.bookkeeper.bookie.BookieShell"
    return (
        tools.java,
        "-Xmx256m",
        "-cp",
        tools.bookkeeper_classpath,
        shell,
        "-conf",
        str(conf),
        *args,
    )


def init_metadata_argv(data_dir: Path, tools: Tools) -> tuple[str, ...]:
    """BookKeeper's own shell initialises /ledgers (instance id, layout, available)."""
    return bookie_shell_argv(data_dir, tools, "initnewcluster")


def shell_conf(topology: Topology) -> str:
    return f"metadataServiceUri={metadata_service_uri(topology)}\nzkTimeout=10000\n"


def relay_spec(relay: PeerRelay, data_dir: Path) -> ProcessSpec:
    """A ZooKeeper node's peer relay (core/routes.PeerRelay), in the node's region."""
    argv = (
        sys.executable, "-m", "cli.cluster.peer_relay", relay.listen.address,
        relay.upstream.address,
    )  # fmt: skip
    log = data_dir / "logs" / f"{relay.node}-relay.log"
    return ProcessSpec(
        f"{relay.node}-relay", "zk-relay", argv, log, {}, relay.region, (relay.listen.port,)
    )


def plan_cluster(topology: Topology, data_dir: Path, tools: Tools) -> list[ProcessSpec]:
    """Every process of the cluster, in start order: ZooKeeper and its peer relays, the WAN
    emulator, bookies."""
    specs = [zookeeper_spec(topology, node, data_dir, tools) for node in topology.zookeeper]
    if len(topology.zookeeper) > 1:
        specs += [relay_spec(relay, data_dir) for relay in peer_relays(topology)]
    specs.append(toxiproxy_spec(topology, data_dir, tools))
    specs += [bookie_spec(topology, b, data_dir, tools) for b in topology.bookies]
    return specs


def proxy_spec(topology_path: Path, proxy: Proxy, data_dir: Path, kind: str) -> ProcessSpec:
    """A proxy (kind write-proxy or read-proxy): `globelog serve KIND` in this Python."""
    argv = (
        sys.executable,
        "-m",
        "cli.main",
        "serve",
        kind,
        "--region",
        proxy.region,
        "--name",
        proxy.name,
        "--topology",
        str(topology_path),
        "--zk-session-timeout-s",
        str(PROXY_ZK_SESSION_TIMEOUT_S),
    )
    log = data_dir / "logs" / f"{proxy.name}.log"
    return ProcessSpec(proxy.name, kind, argv, log, {}, proxy.region, (proxy.endpoint.port,))


def plan_services(topology: Topology, topology_path: Path, data_dir: Path) -> list[ProcessSpec]:
    """globelog's own services of every region, started once the bookies are ready."""
    return [
        proxy_spec(topology_path, proxy, data_dir, kind)
        for region in topology.regions
        for kind, proxies in (
            ("write-proxy", region.write_proxies),
            ("read-proxy", region.read_proxies),
        )
        for proxy in proxies
    ]
