"""Configuration files of a topology's ZooKeeper nodes and bookies, rendered from topology.yaml.

One renderer serves a deployment (`globelog config zookeeper|bookie NAME`, docs/deploy.md)
and the local launcher (localcluster/plan.py), which passes its own timings, its WAN routes and
its loopback settings. Pure: nothing here touches a file or a socket.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.errors import ConfigError
from core.security.secrets import ZK_USER, zk_jaas_file
from core.security.settings import LEDGER_ROLE, SecuritySettings
from core.topology import Bookie, Topology, ZkNode
from core.topology_loader import is_loopback
from ledger import LEDGERS_ROOT


@dataclass(frozen=True, slots=True)
class ZkTimings:
    """ZooKeeper's clock: sessions, follower sync and leader election are counted in ticks."""

    tick_ms: int
    init_limit_ticks: int  # a follower must load the leader's snapshot within this
    sync_limit_ticks: int  # a follower further behind than this leaves the quorum
    max_session_ms: int


# Across regions every quorum message pays a WAN round trip (80-140 ms between continents):
# 2 s ticks keep heartbeats cheap, 10 s of sync slack rides out a congested link, and 60 s
# lets a follower fetch a large snapshot over the WAN after a restart.
DEPLOYED_ZK = ZkTimings(tick_ms=2000, init_limit_ticks=30, sync_limit_ticks=5, max_session_ms=60000)

# (host, peer port, election port) a node dials to reach a peer.
PeerAddress = Callable[[ZkNode, ZkNode], tuple[str, int, int]]


def direct_peer(node: ZkNode, peer: ZkNode) -> tuple[str, int, int]:
    return peer.client.host, peer.peer_port, peer.election_port


def zk_dir(data_dir: Path, node: ZkNode) -> Path:
    return data_dir / "zookeeper" / node.name


def bookie_dir(data_dir: Path, bookie: Bookie) -> Path:
    return data_dir / "bookies" / bookie.name


def zookeeper_node(topology: Topology, name: str) -> ZkNode:
    for node in topology.zookeeper:
        if node.name == name:
            return node
    names = [node.name for node in topology.zookeeper]
    raise ConfigError(f"no ZooKeeper node {name!r} in topology {topology.name!r}; nodes: {names}")


def bookie_named(topology: Topology, name: str) -> Bookie:
    for bookie in topology.bookies:
        if bookie.name == name:
            return bookie
    names = [b.name for b in topology.bookies]
    raise ConfigError(f"no bookie {name!r} in topology {topology.name!r}; bookies: {names}")


# a ZooKeeper node that hears no vote in an election sends its own again after at most this
ELECTION_NOTIFICATION_MAX_MS = 400


def zoo_cfg(
    topology: Topology,
    node: ZkNode,
    data_dir: Path,
    timings: ZkTimings = DEPLOYED_ZK,
    peer_address: PeerAddress = direct_peer,
    four_letter_words: str = "srvr,mntr,ruok,stat",
) -> str:
    """`node`'s zoo.cfg. Its myid file (`myid_file`) holds `node.server_id`."""
    lines = [
        f"# ZooKeeper node {node.name} ({node.region}) of globelog topology {topology.name}",
        f"tickTime={timings.tick_ms}",
        f"initLimit={timings.init_limit_ticks}",
        f"syncLimit={timings.sync_limit_ticks}",
        f"maxSessionTimeout={timings.max_session_ms}",
        f"dataDir={zk_dir(data_dir, node) / 'data'}",
        *_client_port(topology, node),
        "admin.enableServer=false",
        f"4lw.commands.whitelist={four_letter_words}",
        # keep three snapshots and their logs, purged hourly
        "autopurge.snapRetainCount=3",
        "autopurge.purgeInterval=1",
        # clients log in (SASL DIGEST-MD5, users in the JAAS file of java_login_flag); a
        # session that has not is refused before its first request
        "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
        "enforce.auth.enabled=true",
        "enforce.auth.schemes=sasl",
    ]
    if topology.wan is None:
        # A deployment's members join and leave by dynamic reconfiguration (`globelog region
        # add|remove`), which only ZooKeeper's super user may run: the deployment's login
        # (zoo.cfg passes keys it does not know on as `zookeeper.*` system properties). Not in
        # the local cluster: there each node dials its peers through its own region's WAN
        # routes, and with reconfiguration on a follower takes the leader's view of them,
        # its own election address included, which is a route's listener it cannot bind.
        lines += ["reconfigEnabled=true", f"superUser={ZK_USER}"]
    if len(topology.zookeeper) > 1:
        # A node that hears no vote re-sends its own after a wait that doubles up to 60 s by
        # default; across a WAN, where a cut loses a round of votes, elections waited 0.8-1.6 s
        # for the next round (zoo.cfg passes it on as zookeeper.fastleader.*)
        lines.append(f"fastleader.maxNotificationInterval={ELECTION_NOTIFICATION_MAX_MS}")
        lines += _quorum_tls(topology.security, node)
        for peer in topology.zookeeper:
            host, peer_port, election_port = peer_address(node, peer)
            lines.append(f"server.{peer.server_id}={host}:{peer_port}:{election_port}")
    return "\n".join(lines) + "\n"


LOOPBACK_PORT_OFFSET = 10000


def loopback_client_port(node: ZkNode) -> int:
    """The node's plain client port on 127.0.0.1 (TLS on; see `_client_port`)."""
    return node.client.port + LOOPBACK_PORT_OFFSET


def _client_port(topology: Topology, node: ZkNode) -> list[str]:
    """The node's client port: with TLS on, TLS only (Netty), its host's certificate, and
    clients' certificates of the deployment's CA demanded."""
    security = topology.security
    if not security.tls:
        return [f"clientPort={node.client.port}", f"clientPortAddress={node.client.host}"]
    # A deployment's node also listens in clear on loopback only: ZooKeeper's reconfiguration
    # re-binds a joining node's plain client port to the one its member spec names, and needs
    # one to re-bind (membership.changes.server_spec names this one, so nothing moves). The
    # local cluster emulates a WAN and never adds a region (docs/cluster.md): it has none.
    loopback = (
        []
        if topology.wan is not None
        else [
            f"clientPort={loopback_client_port(node)}",
            "clientPortAddress=127.0.0.1",
        ]
    )
    return [
        *loopback,
        f"secureClientPort={node.client.port}",
        f"secureClientPortAddress={node.client.host}",
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
        f"ssl.keyStore.location={security.host_bundle(node.client.host)}",
        "ssl.keyStore.type=PEM",
        f"ssl.trustStore.location={security.ca_cert}",
        "ssl.trustStore.type=PEM",
        # clients show a certificate of the deployment's CA, then log in with SASL inside TLS
        "ssl.clientAuth=need",
        # ZooKeeper 3.9 serves TLS 1.3 only by default; Java clients ask for 1.2, which every
        # server release speaks (java_zookeeper_flags)
        "ssl.enabledProtocols=TLSv1.3,TLSv1.2",
    ]


def _quorum_tls(security: SecuritySettings, node: ZkNode) -> list[str]:
    """With TLS on, the nodes' quorum and election links too: each side shows its host's
    certificate of the deployment's CA, checked against the address it dials or comes from,
    so neither the znodes replicated between nodes (ledger passwords among them) nor the
    votes cross a network in clear or come from a host that is not one of ours."""
    if not security.tls:
        return []
    return [
        "sslQuorum=true",
        f"ssl.quorum.keyStore.location={security.host_bundle(node.client.host)}",
        "ssl.quorum.keyStore.type=PEM",
        f"ssl.quorum.trustStore.location={security.ca_cert}",
        "ssl.quorum.trustStore.type=PEM",
        "ssl.quorum.hostnameVerification=true",
        "sslQuorumReloadCertFiles=true",  # a renewed host certificate is used without a restart
    ]


def java_zookeeper_flags(topology: Topology) -> tuple[str, ...]:
    """JVM flags of a Java ZooKeeper client of the deployment (bookies, BookKeeper's tools):
    its login, and with TLS on, ZooKeeper's TLS port verified against the deployment's CA."""
    flags = [java_login_flag(topology)]
    if topology.security.tls:
        flags += [
            "-Dzookeeper.client.secure=true",
            "-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
            f"-Dzookeeper.ssl.trustStore.location={topology.security.ca_cert}",
            "-Dzookeeper.ssl.trustStore.type=PEM",
            f"-Dzookeeper.ssl.keyStore.location={topology.security.ledger_client_bundle}",
            "-Dzookeeper.ssl.keyStore.type=PEM",
            # ZooKeeper 3.8's port (Debian 12's package) speaks TLS 1.2 only, BookKeeper's 3.9
            # client would offer 1.3 only; globelog's zoo.cfg accepts both (_client_port)
            "-Dzookeeper.ssl.protocol=TLSv1.2",
        ]
    return tuple(flags)


def bookie_env(topology: Topology) -> str:
    """`BOOKIE_EXTRA_OPTS="..."`: the JVM flags BookKeeper's `bin/bookkeeper bookie` adds, in
    the syntax of systemd's EnvironmentFile and of a POSIX shell's `.`."""
    flags = java_zookeeper_flags(topology)
    for flag in flags:  # the launcher splits the variable at blanks, unquoted
        if any(c.isspace() or c in "\"'$`\\" for c in flag):
            raise ConfigError(
                f"bookie JVM flag {flag!r}: expected no blank, quote, $, ` or \\ in the "
                "security directory's path"
            )
    return f'BOOKIE_EXTRA_OPTS="{" ".join(flags)}"\n'


def java_login_flag(topology: Topology) -> str:
    """The JVM flag naming the deployment's JAAS file: ZooKeeper's nodes read its users
    (Server), bookies and BookKeeper's tools log in with it (Client)."""
    return f"-Djava.security.auth.login.config={zk_jaas_file(topology.security)}"


TLS_FACTORY = "org.apache.bookkeeper.tls.TLSContextFactory"
# Netty's OpenSSL engine (BoringSSL, shipped in BookKeeper's distribution): the JDK's own engine
# authenticates AES-GCM records in Java code here (GHASH over direct buffers), which made TLS
# cost a bookie half again its CPU per byte (docs/benchmarks.md). Where the native library
# cannot load, BookKeeper logs why and falls back to the JDK's engine.
TLS_PROVIDER = "OpenSSL"
# Refuses every request of a connection until its TLS handshake showed a client certificate
# whose role (subject OU "0:<role>") is authorized: a bookie then serves nobody in clear.
ROLE_AUTHORIZATION = "org.apache.bookkeeper.tls.BookieAuthZFactory"
CERT_RELOAD_S = 300  # a renewed certificate is served within this


def bookie_tls_lines(security: SecuritySettings, host: str) -> list[str]:
    """A bookie's TLS: its host's certificate, clients' certificates verified against the
    deployment's CA, and only the globelog role served."""
    return [
        f"tlsProviderFactoryClass={TLS_FACTORY}",
        f"tlsProvider={TLS_PROVIDER}",
        "tlsKeyStoreType=PEM",
        f"tlsKeyStore={security.host_key(host)}",
        f"tlsCertificatePath={security.host_cert(host)}",
        "tlsTrustStoreType=PEM",
        f"tlsTrustStore={security.ca_cert}",
        "tlsClientAuthentication=true",
        "tlsEnabledProtocols=TLSv1.3,TLSv1.2",
        f"tlsCertFilesRefreshDurationSeconds={CERT_RELOAD_S}",
        f"bookieAuthProviderFactoryClass={ROLE_AUTHORIZATION}",
        f"authorizedRoles={LEDGER_ROLE}",
    ]


def client_tls_lines(security: SecuritySettings) -> list[str]:
    """BookKeeper's Java client (its shell, its tools) over TLS with globelog's client
    certificate."""
    return [
        f"tlsProviderFactoryClass={TLS_FACTORY}",
        f"tlsProvider={TLS_PROVIDER}",
        "tlsTrustStoreType=PEM",
        f"tlsTrustStore={security.ca_cert}",
        "tlsClientAuthentication=true",
        "tlsKeyStoreType=PEM",
        f"tlsKeyStore={security.ledger_client_key}",
        f"tlsCertificatePath={security.ledger_client_cert}",
    ]


def java_client_flags(topology: Topology) -> tuple[str, ...]:
    """JVM flags of a BookKeeper Java client built without a configuration file (its
    benchmarks): the ZooKeeper login, and TLS to the bookies as system properties, which
    BookKeeper's configurations read when told to."""
    flags = list(java_zookeeper_flags(topology))
    # the znodes it creates (ledger metadata) are the deployment's user's alone, as the
    # bookies' are (zkEnableSecurity), whatever else the client is configured with
    flags += ["-Dorg.apache.bookkeeper.conf.readsystemproperties=true", "-DzkEnableSecurity=true"]
    if topology.security.tls:
        flags += [f"-D{line}" for line in client_tls_lines(topology.security)]
    return tuple(flags)


def myid_file(data_dir: Path, node: ZkNode) -> tuple[Path, str]:
    return zk_dir(data_dir, node) / "data" / "myid", f"{node.server_id}\n"


def metadata_service_uri(topology: Topology, region: str | None = None) -> str:
    """BookKeeper's metadata URI: the region's own ZooKeeper nodes, or the whole ensemble."""
    nodes = topology.zookeeper if region is None else topology.zk_nodes_for(region)
    hosts = ";".join(node.client.address for node in nodes)
    return f"zk+hierarchical://{hosts}{LEDGERS_ROOT}"


BOOKIE_ZK_SESSION_MS = 15_000


def bookie_conf(topology: Topology, bookie: Bookie, data_dir: Path, local: bool = False) -> str:
    """`bookie`'s bk.conf. The bookie registers as host:port (its id in topology.yaml) and
    fsyncs its journal before every acknowledgement. `local` binds loopback only and lets
    the machine's shared disk fill further before the bookie turns read-only."""
    home = bookie_dir(data_dir, bookie)
    lines = [
        f"# bookie {bookie.name} ({bookie.region}/{bookie.rack}) of globelog topology "
        f"{topology.name}",
        f"bookiePort={bookie.endpoint.port}",
        f"advertisedAddress={bookie.endpoint.host}",
        "useHostNameAsBookieID=false",
        f"journalDirectories={home / 'journal'}",
        f"ledgerDirectories={home / 'ledgers'}",
        # the bookie's own region's ZooKeeper nodes: registration never waits on the WAN
        f"metadataServiceUri={metadata_service_uri(topology, bookie.region)}",
        # 15 s, not BookKeeper's 10: a bookie reaches only its region's nodes, which stop
        # serving while the region is cut off, and a 6 s cut plus the time since its last ping
        # and its reconnect after the heal ended 10 s sessions; a bookie whose registration
        # is gone is no candidate for placement until it has registered again, and the next
        # cut then found no region left for replacement copies (docs/deploy.md)
        f"zkTimeout={BOOKIE_ZK_SESSION_MS}",
        # the znodes it creates are its login's alone (the JAAS file of java_login_flag)
        "zkEnableSecurity=true",
        "httpServerEnabled=false",
        # fsync the journal before every acknowledgement (BookKeeper's default, stated)
        "journalSyncData=true",
        "journalMaxGroupWaitMSec=1",
    ]
    if topology.security.tls:
        lines += bookie_tls_lines(topology.security, bookie.endpoint.host)
    if is_loopback(bookie.endpoint.host):
        lines.append("allowLoopback=true")
    if local:
        lines += [
            "listeningInterface=lo",
            # every local bookie shares one disk; do not go read-only at BookKeeper's 95 %
            "diskUsageThreshold=0.99",
            "diskUsageWarnThreshold=0.98",
        ]
    return "\n".join(lines) + "\n"


def bookie_dirs(data_dir: Path, bookie: Bookie) -> tuple[Path, Path]:
    home = bookie_dir(data_dir, bookie)
    return home / "journal", home / "ledgers"
