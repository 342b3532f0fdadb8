"""Pure planning of the local cluster's processes: their config files and command lines."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from core.routes import PeerRelay, peer_relays, plan_routes, route_to
from core.topology import Bookie, Proxy, Topology, ZkNode
from localcluster import nodes
from localcluster.tools import Tools

ZK_TICK_MS = 200  # short ticks: sessions can be as short as 2 ticks, so tests run fast
# A follower that hears nothing from the leader for 1 s stops serving (and a leader without a
# quorum of followers steps down): below the proxies' 1.5 s sessions, so their clients still
# have time to carry the session over to a node that follows the leader (routes.zk_hosts_for)
ZK_SYNC_LIMIT_TICKS = 5
BOOKIE_HEAP = "-Xmx512m"
BOOKIE_DIRECT_MEMORY = "-XX:MaxDirectMemorySize=512m"
# A local cluster runs nine to a dozen JVMs on one machine. Lean ones (the client compiler
# only, the serial collector) start on about two thirds of the CPU (3 ZooKeeper nodes and 6
# bookies: 34-41 CPU-s against 54-62 with the JVM's defaults, on this machine's 2 cores),
# which is most of what a test or a demo asks of them. Benchmarks that time the bookies
# start theirs "full" (the JVM's defaults, as a deployment runs them).
LEAN_JVM = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
# ZooKeeper logs through slf4j-simple, which stamps no time by default: an election's steps
# are then impossible to line up with the proxies' logs
ZK_LOG_TIMES = (
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
)
PROXY_ZK_SESSION_TIMEOUT_S = 1.5  # a dead proxy's streams are taken over after this


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """One process of the cluster: what to write before starting it and how to start it."""

    name: str
    # "zookeeper" | "zk-relay" | "bookie" | "toxiproxy" | "write-proxy" | "read-proxy" |
    # "rebuilder" | "console"
    kind: str
    argv: tuple[str, ...]
    log: Path
    files: dict[Path, str] = field(default_factory=dict, hash=False)
    region: str | None = None
    ports: tuple[int, ...] = ()


# initLimit 4 s (20 ticks): a node cut off just after it led can elect itself again (its
# peers' last votes named it) and then waits out initLimit for followers that cannot reach
# it, serving nothing; at 10 s that outlasted a 6 s cut, kept the node out of the quorum
# after the heal, and its bookies' sessions (only their region's node) expired.
LOCAL_ZK = nodes.ZkTimings(
    tick_ms=ZK_TICK_MS, init_limit_ticks=20, sync_limit_ticks=ZK_SYNC_LIMIT_TICKS,
    max_session_ms=60000,
)  # fmt: skip


def through_wan(topology: Topology) -> nodes.PeerAddress:
    """How one node dials a peer here: through the WAN emulator when they are in two regions,
    so a partition between two regions cuts their quorum traffic too."""
    routes = plan_routes(topology)

    def address(node: ZkNode, peer: ZkNode) -> tuple[str, int, int]:
        peer_route = route_to(routes, node.region, "zk-peer", peer.name)
        election_route = route_to(routes, node.region, "zk-election", peer.name)
        if peer_route is None or election_route is None:
            return nodes.direct_peer(node, peer)
        return peer_route.listen.host, peer_route.listen.port, election_route.listen.port

    return address


def zookeeper_spec(
    topology: Topology, node: ZkNode, data_dir: Path, tools: Tools, lean: bool = True
) -> ProcessSpec:
    home = nodes.zk_dir(data_dir, node)
    cfg = nodes.zoo_cfg(topology, node, data_dir, LOCAL_ZK, through_wan(topology), "*")
    myid, myid_text = nodes.myid_file(data_dir, node)
    files = {home / "zoo.cfg": cfg, myid: myid_text}
    argv = (
        tools.java,
        "-Xmx256m",
        *(LEAN_JVM if lean else ("-XX:+UseSerialGC",)),
        *ZK_LOG_TIMES,
        nodes.java_login_flag(topology),
        "-cp",
        tools.zookeeper_classpath,
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        str(home / "zoo.cfg"),
    )
    ports = (node.client.port, node.peer_port, node.election_port)
    log = data_dir / "logs" / f"{node.name}.log"
    return ProcessSpec(node.name, "zookeeper", argv, log, files, node.region, ports)


def bookie_spec(
    topology: Topology, bookie: Bookie, data_dir: Path, tools: Tools, lean: bool = True
) -> ProcessSpec:
    conf = nodes.bookie_dir(data_dir, bookie) / "bk.conf"
    argv = (
        tools.java,
        BOOKIE_HEAP,
        BOOKIE_DIRECT_MEMORY,
        *(LEAN_JVM if lean else ()),
        *nodes.java_zookeeper_flags(topology),
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
        {conf: nodes.bookie_conf(topology, bookie, data_dir, local=True)},
        bookie.region,
        (bookie.endpoint.port,),
    )


def toxiproxy_spec(topology: Topology, data_dir: Path, tools: Tools) -> ProcessSpec:
    api = topology.emulated_wan.toxiproxy
    argv = (tools.toxiproxy, "-host", api.host, "-port", str(api.port), "-seed", "7")
    routes = plan_routes(topology)
    ports = (api.port, *(route.listen.port for route in routes))
    log = data_dir / "logs" / "toxiproxy.log"
    return ProcessSpec("toxiproxy", "toxiproxy", argv, log, ports=ports)


def shell_conf(topology: Topology) -> str:
    """BookKeeper's shell and tools: the whole ensemble, creating znodes as their login's
    (run with nodes.java_zookeeper_flags), bookies over TLS with globelog's client certificate."""
    lines = [
        f"metadataServiceUri={nodes.metadata_service_uri(topology)}",
        "zkTimeout=10000",
        "zkEnableSecurity=true",
    ]
    if topology.security.tls:
        lines += nodes.client_tls_lines(topology.security)
    return "\n".join(lines) + "\n"


def relay_spec(relay: PeerRelay, data_dir: Path) -> ProcessSpec:
    """A ZooKeeper node's peer relay (core/routes.PeerRelay), in the node's region."""
    argv = (
        sys.executable, "-m", "localcluster.peer_relay", relay.listen.address,
        relay.upstream.address,
    )  # fmt: skip
    log = data_dir / "logs" / f"{relay.node}-relay.log"
    return ProcessSpec(
        f"{relay.node}-relay", "zk-relay", argv, log, {}, relay.region, (relay.listen.port,)
    )


def plan_cluster(
    topology: Topology, data_dir: Path, tools: Tools, lean: bool = True
) -> list[ProcessSpec]:
    """Every process of the cluster, in start order: ZooKeeper and its peer relays, the WAN
    emulator, bookies (`lean`: their JVMs with LEAN_JVM)."""
    specs = [zookeeper_spec(topology, n, data_dir, tools, lean) for n in topology.zookeeper]
    if len(topology.zookeeper) > 1:
        specs += [relay_spec(relay, data_dir) for relay in peer_relays(topology)]
    specs.append(toxiproxy_spec(topology, data_dir, tools))
    specs += [bookie_spec(topology, b, data_dir, tools, lean) for b in topology.bookies]
    return specs


def session_file(data_dir: Path, name: str) -> Path:
    """Where a write proxy of the local cluster keeps its ZooKeeper session's credentials."""
    return data_dir / "sessions" / f"{name}.json"


def proxy_spec(topology_path: Path, proxy: Proxy, data_dir: Path, kind: str) -> ProcessSpec:
    """A proxy (kind write-proxy or read-proxy): `globelog serve KIND` in this Python."""
    argv: tuple[str, ...] = (
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
    if kind == "write-proxy":  # for `globelog cluster expire-session` (failover drills)
        argv += ("--session-file", str(session_file(data_dir, proxy.name)))
    log = data_dir / "logs" / f"{proxy.name}.log"
    return ProcessSpec(proxy.name, kind, argv, log, {}, proxy.region, (proxy.endpoint.port,))


def rebuilder_name(region: str) -> str:
    return f"rebuilder-{region}"


def rebuilder_spec(topology_path: Path, region: str, data_dir: Path) -> ProcessSpec:
    """A region's rebuilder (`globelog serve rebuilder`): it has no port; it is ready once
    its status znode is published."""
    name = rebuilder_name(region)
    argv = (
        sys.executable, "-m", "cli.main", "serve", "rebuilder", "--region", region,
        "--name", name, "--topology", str(topology_path),
        "--zk-session-timeout-s", str(PROXY_ZK_SESSION_TIMEOUT_S),
    )  # fmt: skip
    return ProcessSpec(name, "rebuilder", argv, data_dir / "logs" / f"{name}.log", {}, region, ())


def plan_services(topology: Topology, topology_path: Path, data_dir: Path) -> list[ProcessSpec]:
    """globelog's own services of every region, started once the bookies are ready."""
    proxies = [
        proxy_spec(topology_path, proxy, data_dir, kind)
        for region in topology.regions
        for kind, proxies in (
            ("write-proxy", region.write_proxies),
            ("read-proxy", region.read_proxies),
        )
        for proxy in proxies
    ]
    consoles = [
        console_spec(topology_path, console, data_dir)
        for region in topology.regions
        for console in region.consoles
    ]
    rebuilders = [rebuilder_spec(topology_path, r.name, data_dir) for r in topology.regions]
    return proxies + rebuilders + consoles


def console_spec(topology_path: Path, console: Proxy, data_dir: Path) -> ProcessSpec:
    """A region's web console (`globelog serve console`): failover runs are looked for under
    the data dir, its audit log is kept there."""
    argv = (
        sys.executable, "-m", "cli.main", "serve", "console", "--region", console.region,
        "--name", console.name, "--topology", str(topology_path),
        "--failover-runs", str(data_dir / "failover-runs"),
        "--audit-log", str(data_dir / "logs" / f"{console.name}-audit.jsonl"),
    )  # fmt: skip
    log = data_dir / "logs" / f"{console.name}.log"
    return ProcessSpec(
        console.name, "console", argv, log, {}, console.region, (console.endpoint.port,)
    )
