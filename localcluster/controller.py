"""`globelog cluster ...`: bring the local cluster up and down, report it, inject faults."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import ClusterError, GlobelogError, NoNodeError
from core.security.credentials import adopt_operator_credentials, client_ssl, default_token
from core.security.files import init_security
from core.security.secrets import zk_login
from core.settings.rebuild_settings import REBUILDERS_ZNODE
from core.topology import Topology
from core.topology_loader import require_local
from global_meta import ANY_VERSION, MetaStore, tokens
from global_meta.faults import expire_session_of, read_session_file
from ledger import LEDGERS_ROOT, init_cluster_metadata
from localcluster import metadata, nodes, plan, processes, wan
from localcluster.metadata import registered_bookies
from localcluster.probes import (
    log_lines,
    log_tail,
    service_health,
    wait_until,
    zookeeper_mode,
    zookeeper_tls,
)
from localcluster.processes import ProcessRecord, RunState
from localcluster.tools import Tools

ZK_READY_TIMEOUT_S = 60.0
BOOKIE_READY_TIMEOUT_S = 120.0
TOXIPROXY_READY_TIMEOUT_S = 20.0
SERVICE_READY_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Cluster:
    """One local cluster: its topology, data dir and WAN profile."""

    topology: Topology
    topology_path: Path
    data_dir: Path
    profile: str
    services: bool = False  # also run globelog's services (every region's write and read proxies)
    lean_jvms: bool = True  # ZooKeeper and bookies on lean JVMs (localcluster/plan.py LEAN_JVM)

    def __post_init__(self) -> None:
        # Every process of this cluster runs here, on loopback, behind the emulated WAN.
        require_local(self.topology, str(self.topology_path))


@dataclass(slots=True)
class UpReport:
    phases_s: dict[str, float] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    already_running: list[str] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        return self.phases_s.get("total", 0.0)


def load_records(cluster: Cluster) -> dict[str, ProcessRecord]:
    return processes.load_state(cluster.data_dir)


def save_records(cluster: Cluster, records: dict[str, ProcessRecord]) -> None:
    processes.save_state(
        cluster.data_dir,
        records,
        {"topology": str(cluster.topology_path), "profile": cluster.profile},
    )


def _start_missing(cluster: Cluster, specs: list[plan.ProcessSpec], report: UpReport) -> None:
    records = load_records(cluster)
    for spec in specs:
        record = records.get(spec.name)
        if record is not None and processes.run_state(record) is not RunState.DEAD:
            report.already_running.append(spec.name)
            continue
        # Another cluster on the same ports would answer our readiness probes: refuse.
        taken = [port for port in spec.ports if not port_free(port)]
        if taken:
            raise ClusterError(
                f"start {spec.name}: port(s) {taken} already in use by another process; "
                "is another cluster up with this topology? (`globelog cluster down`)"
            )
        records[spec.name] = processes.start(spec)
        report.started.append(spec.name)
    save_records(cluster, records)


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _check_alive(cluster: Cluster) -> None:
    """Every recorded process still runs (one that died at start could hide behind a port)."""
    dead = [
        r.name for r in load_records(cluster).values() if processes.run_state(r) is RunState.DEAD
    ]
    if dead:
        logs = "".join(log_tail(load_records(cluster)[name].log, 8) for name in dead[:2])
        raise ClusterError(f"process(es) {dead} exited during start-up:{logs}")


async def wait_zookeeper(cluster: Cluster) -> None:
    nodes = cluster.topology.zookeeper
    records = load_records(cluster)

    async def serving() -> bool:
        modes = await asyncio.gather(
            *(zookeeper_mode(n.client, zookeeper_tls(cluster.topology.security)) for n in nodes)
        )
        return all(modes)

    await wait_until(
        "ZooKeeper ensemble",
        serving,
        ZK_READY_TIMEOUT_S,
        lambda: "".join(log_tail(records[n.name].log) for n in nodes[:1]),
    )


async def _init_metadata(cluster: Cluster, store: MetaStore) -> bool:
    """Creates BookKeeper's metadata root once (as `globelog init` does); False when it
    exists. Also writes the conf that BookKeeper's shell uses on this cluster."""
    conf = cluster.data_dir / "bookies" / "shell.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(plan.shell_conf(cluster.topology))
    await tokens.record_admin_token(store, cluster.topology.security, time.time())
    return await init_cluster_metadata(store) is not None


async def _wait_bookies(cluster: Cluster, store: MetaStore, names: set[str] | None = None) -> None:
    """Waits until the bookies (all, or those named) are registered writable."""
    chosen = [b for b in cluster.topology.bookies if names is None or b.name in names]
    wanted = {b.bookie_id for b in chosen}
    records = load_records(cluster)

    async def registered() -> bool:
        writable, _ = await registered_bookies(store)
        return wanted <= writable

    def missing() -> str:
        lines = [
            f"\n  {b.name} ({b.bookie_id}):{log_tail(records[b.name].log, 8)}"
            for b in chosen
            if b.name in records
        ]
        return "".join(lines)

    await wait_until("bookie registration", registered, BOOKIE_READY_TIMEOUT_S, missing)


async def _wait_toxiproxy(cluster: Cluster) -> None:
    async def answering() -> bool:
        try:
            async with wan.Toxiproxy(cluster.topology.emulated_wan.toxiproxy.address) as api:
                return bool(await api.version())
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            return False

    await wait_until("toxiproxy", answering, TOXIPROXY_READY_TIMEOUT_S)


async def publish(cluster: Cluster, store: MetaStore) -> None:
    """Writes bookie locations and per-region dial addresses for every client to read."""
    await metadata.publish(store, cluster.topology)


async def up(cluster: Cluster, tools: Tools) -> UpReport:
    """Starts whatever is not running and waits until all of it is ready (idempotent)."""
    report = UpReport()
    started = time.monotonic()
    # the deployment's keys, admin token and certificates, once; this process (the operator's
    # tool that brings the cluster up) acts with them unless its environment names others
    topology = cluster.topology
    init_security(topology.security, time.time(), topology.tls_hosts, topology.name)
    adopt_operator_credentials(topology.security)
    specs = plan.plan_cluster(cluster.topology, cluster.data_dir, tools, cluster.lean_jvms)
    first = [s for s in specs if s.kind in ("zookeeper", "zk-relay", "toxiproxy")]
    _start_missing(cluster, first, report)
    # ZooKeeper's quorum traffic crosses the WAN emulator: its routes come first.
    await _wait_toxiproxy(cluster)
    await wan.configure_wan(cluster.topology, cluster.profile)
    report.phases_s["wan"] = time.monotonic() - started
    await wait_zookeeper(cluster)
    report.phases_s["zookeeper"] = time.monotonic() - started
    async with await MetaStore.of(cluster.topology) as store:
        mark = time.monotonic()
        await _init_metadata(cluster, store)
        report.phases_s["metadata_init"] = time.monotonic() - mark
        mark = time.monotonic()
        _start_missing(cluster, [s for s in specs if s.kind == "bookie"], report)
        await publish(cluster, store)
        await _wait_bookies(cluster, store)
        report.phases_s["bookies"] = time.monotonic() - mark
    if cluster.services:
        mark = time.monotonic()
        services = plan.plan_services(cluster.topology, cluster.topology_path, cluster.data_dir)
        _start_missing(cluster, services, report)
        await wait_services(cluster, services)
        report.phases_s["services"] = time.monotonic() - mark
    _check_alive(cluster)
    report.phases_s["total"] = time.monotonic() - started
    return report


async def _proxy_health(cluster: Cluster, name: str) -> tuple[bool, str]:
    """The health of the topology's proxy `name`, asked as the operator."""
    topology = cluster.topology
    proxy = next(
        p
        for r in topology.regions
        for p in r.write_proxies + r.read_proxies + r.consoles
        if p.name == name
    )
    security = topology.security
    return await service_health(
        topology.proxy_url(proxy), default_token(security), client_ssl(security)
    )


async def wait_services(cluster: Cluster, specs: list[plan.ProcessSpec]) -> None:
    """Until every proxy answers its health and every rebuilder has published its status."""
    served = [spec for spec in specs if spec.ports]
    rebuilders = {spec.name for spec in specs if spec.kind == "rebuilder"}

    async def serving() -> bool:
        _check_alive(cluster)
        answers = [await _proxy_health(cluster, spec.name) for spec in served]
        return all(ok for ok, _ in answers)

    await wait_until("proxies (/v1/health)", serving, SERVICE_READY_TIMEOUT_S)
    if rebuilders:
        async with await MetaStore.of(cluster.topology) as store:

            async def published() -> bool:
                _check_alive(cluster)
                return rebuilders <= await _published_rebuilders(store)

            await wait_until("rebuilders (their status)", published, SERVICE_READY_TIMEOUT_S)


async def _published_rebuilders(store: MetaStore) -> set[str]:
    try:
        return set(await store.children(REBUILDERS_ZNODE))
    except NoNodeError:
        return set()


async def wipe_bookie(cluster: Cluster, name: str) -> str:
    """A bookie lost for good: killed, its journal and ledger directories and its cookie
    deleted. `restart NAME` then brings up an empty bookie under the same id (a new disk)."""
    records = load_records(cluster)
    record = records.get(name)
    if record is None or record.kind != "bookie":
        bookies = sorted(n for n, r in records.items() if r.kind == "bookie")
        raise ClusterError(f"cluster wipe {name!r}: expected a bookie, one of {bookies}")
    if processes.run_state(record) is not RunState.DEAD:
        processes.stop(record, grace_s=0.0)  # a disk lost: no orderly shutdown
    bookie = cluster.topology.bookie(name)
    for directory in nodes.bookie_dirs(cluster.data_dir, bookie):
        shutil.rmtree(directory, ignore_errors=True)
    cookie = f"{LEDGERS_ROOT}/cookies/{bookie.bookie_id}"
    async with await MetaStore.of(cluster.topology) as store:
        with contextlib.suppress(NoNodeError):
            await store.delete(cookie, version=ANY_VERSION)
    return f"wiped {name} (pid {record.pid} killed; its data and cookie deleted)"


def down(cluster: Cluster, purge: bool = False) -> list[str]:
    """Stops exactly the processes this data dir's state lists; `purge` removes the data."""
    records = load_records(cluster)
    # services first (they release their streams), then bookies, the WAN, ZooKeeper last
    rank = {
        "console": 0, "write-proxy": 0, "read-proxy": 0, "rebuilder": 0, "bookie": 1,
        "toxiproxy": 2,
    }  # fmt: skip
    order = sorted(records.values(), key=lambda r: rank.get(r.kind, 3))
    stopped = []
    for record in order:
        if processes.run_state(record) is not RunState.DEAD:
            processes.stop(record)
            stopped.append(record.name)
    if purge:
        shutil.rmtree(cluster.data_dir, ignore_errors=True)
    else:
        save_records(cluster, {})
    return stopped


async def status(cluster: Cluster) -> dict[str, Any]:
    """Every process's state and health, and every WAN route, as a JSON-able dict."""
    records = load_records(cluster)
    result: dict[str, Any] = {
        "topology": cluster.topology.name,
        "data_dir": str(cluster.data_dir),
        "profile": cluster.profile,
        "processes": {},
        "wan": {},
    }
    registered: tuple[set[str], set[str]] | None = None
    rebuilders: set[str] | None = None
    try:
        store = await MetaStore.of(cluster.topology, connect_timeout_s=3.0)
        async with store:
            registered = await registered_bookies(store)
            rebuilders = await _published_rebuilders(store)
    except GlobelogError:
        registered = None
    for name, record in records.items():
        entry: dict[str, Any] = {
            "kind": record.kind,
            "region": record.region,
            "pid": record.pid,
            "state": processes.run_state(record).value,
            "log": record.log,
            "ports": list(record.ports),
        }
        entry["healthy"], entry["detail"] = await _health(
            cluster, record, entry["state"], registered, rebuilders
        )
        result["processes"][name] = entry
    if "toxiproxy" in records and result["processes"]["toxiproxy"]["healthy"]:
        result["wan"] = await wan.wan_status(cluster.topology)
    result["healthy"] = bool(records) and all(p["healthy"] for p in result["processes"].values())
    return result


async def _health(
    cluster: Cluster,
    record: ProcessRecord,
    state: str,
    registered: tuple[set[str], set[str]] | None,
    rebuilders: set[str] | None = None,
) -> tuple[bool, str]:
    if state != RunState.RUNNING.value:
        return False, state
    if record.kind == "rebuilder":
        if rebuilders is None:
            return False, "metadata unreachable"
        published = record.name in rebuilders
        return published, "status published" if published else "no status published"
    if record.kind == "zookeeper":
        node = next(n for n in cluster.topology.zookeeper if n.name == record.name)
        mode = await zookeeper_mode(node.client, zookeeper_tls(cluster.topology.security))
        return mode is not None, f"mode {mode}" if mode else "not serving"
    if record.kind == "bookie":
        bookie_id = cluster.topology.bookie(record.name).bookie_id
        if registered is None:
            return False, "metadata unreachable"
        if bookie_id in registered[0]:
            return True, "registered writable"
        return False, "registered read-only" if bookie_id in registered[1] else "not registered"
    if record.kind in ("write-proxy", "read-proxy", "console"):
        return await _proxy_health(cluster, record.name)
    if record.kind == "zk-relay":
        return await _port_open(record.ports[0])
    try:
        async with wan.Toxiproxy(cluster.topology.emulated_wan.toxiproxy.address) as api:
            return True, f"version {await api.version()}"
    except Exception as err:  # noqa: BLE001
        return False, f"API not answering: {err!r}"


async def _port_open(port: int) -> tuple[bool, str]:
    try:
        async with asyncio.timeout(1.0):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
    except (OSError, TimeoutError) as err:
        return False, f"port {port} not accepting: {err!r}"
    writer.close()
    return True, f"accepting on {port}"


async def expire_session(cluster: Cluster, name: str) -> str:
    """Makes ZooKeeper expire a running write proxy's session (as if it had been silent past
    its timeout): its locks and registration go; the proxy learns it from the server."""
    records = load_records(cluster)
    record = records.get(name)
    if record is None or record.kind != "write-proxy":
        proxies = sorted(n for n, r in records.items() if r.kind == "write-proxy")
        raise ClusterError(
            f"cluster expire-session {name!r}: expected a write proxy, one of {proxies}"
        )
    path = plan.session_file(cluster.data_dir, name)
    credentials = read_session_file(path)
    await expire_session_of(
        cluster.topology.zk_connect, zk_login(cluster.topology.security), credentials
    )
    return f"expired ZooKeeper session {credentials[0]:#x} of {name}"


FAULT_SIGNALS = {"kill": signal.SIGKILL, "pause": signal.SIGSTOP, "resume": signal.SIGCONT}
FAULT_RESULT = {"kill": RunState.DEAD, "pause": RunState.PAUSED, "resume": RunState.RUNNING}
FAULT_SETTLE_TIMEOUT_S = 10.0


async def fault(cluster: Cluster, tools: Tools, action: str, name: str) -> str:
    """kill | pause | resume | restart one process by its topology name."""
    records = load_records(cluster)
    if name not in records:
        raise ClusterError(f"cluster {action}: no process {name!r}; known: {sorted(records)}")
    record = records[name]
    if action in FAULT_SIGNALS:
        if not processes.signal_process(record, FAULT_SIGNALS[action]):
            raise ClusterError(f"cluster {action} {name}: pid {record.pid} is not running")
        wanted = FAULT_RESULT[action]

        async def settled() -> bool:
            return processes.run_state(record) is wanted

        # Signals are delivered asynchronously: return once the fault has taken effect.
        await wait_until(f"{action} {name}", settled, FAULT_SETTLE_TIMEOUT_S)
        return f"{action} {name} (pid {record.pid})"
    assert action == "restart", action
    if record.kind == "bookie":
        return await _restart_bookie(cluster, tools, record)
    processes.stop(record)
    specs = plan.plan_cluster(cluster.topology, cluster.data_dir, tools, cluster.lean_jvms)
    specs += plan.plan_services(cluster.topology, cluster.topology_path, cluster.data_dir)
    spec = next(s for s in specs if s.name == name)
    records[name] = processes.start(spec)
    save_records(cluster, records)
    if record.kind in ("write-proxy", "read-proxy", "rebuilder", "console"):
        await wait_services(cluster, [spec])
    elif record.kind == "toxiproxy":
        await _wait_toxiproxy(cluster)
        await wan.configure_wan(cluster.topology, cluster.profile)
    else:
        await wait_zookeeper(cluster)
    return f"restart {name} (pid {record.pid} -> {records[name].pid})"


async def revive(
    cluster: Cluster, tools: Tools, said: Callable[[str], None] | None = None
) -> list[str]:
    """Starts again every process of the cluster that is not running, as the deployment's
    systemd units do (Restart=on-failure; deploy/systemd): a bookie whose re-registration
    met its own node after a long cut exits with code 4 (docs/cluster.md). For callers that
    know no fault holds a process down (a failover run between its faults). What it started,
    each with the last error its log shows (given to `said` as soon as it is started)."""
    revived = []
    for name, record in load_records(cluster).items():
        if processes.run_state(record) is not RunState.DEAD:
            continue
        why = _last_error(record.log)
        done = await fault(cluster, tools, "restart", name)
        revived.append(f"{name} had exited ({why}); {done}")
        if said is not None:
            said(revived[-1])
    return revived


LAST_ERROR_TAIL_BYTES = 64 * 1024  # of a log, read for the last error line
LAST_ERROR_CHARS = 300


def _last_error(log_path: str) -> str:
    """The last line of the log that says ERROR or exit code, else 'no error logged'."""
    for line in reversed(log_lines(log_path, LAST_ERROR_TAIL_BYTES)):
        if "ERROR" in line or "exitCode" in line:
            return line.strip()[:LAST_ERROR_CHARS]
    return "no error logged"


async def _restart_bookie(cluster: Cluster, tools: Tools, record: ProcessRecord) -> str:
    processes.stop(record)
    spec = next(
        s
        for s in plan.plan_cluster(cluster.topology, cluster.data_dir, tools, cluster.lean_jvms)
        if s.name == record.name
    )
    await restart_bookies(cluster, [spec])
    return f"restart {record.name} (pid {record.pid} -> {load_records(cluster)[record.name].pid})"


async def restart_bookies(cluster: Cluster, specs: list[plan.ProcessSpec]) -> None:
    """Starts the (stopped) bookies and waits for registrations by their new ZooKeeper
    sessions: a killed bookie's node outlives it until its session expires, so "registered"
    alone would be satisfied by the dead process's node."""
    znodes = {
        s.name: f"{LEDGERS_ROOT}/available/{cluster.topology.bookie(s.name).bookie_id}"
        for s in specs
    }
    async with await MetaStore.of(cluster.topology) as store:
        before = {name: await store.exists(znode) for name, znode in znodes.items()}
        records = load_records(cluster)
        for spec in specs:
            records[spec.name] = processes.start(spec)
        save_records(cluster, records)

        async def registered_anew() -> bool:
            for name, znode in znodes.items():
                stat, old = await store.exists(znode), before[name]
                if stat is None or (
                    old is not None and stat.ephemeral_owner == old.ephemeral_owner
                ):
                    return False
            return True

        await wait_until(
            "bookie registration",
            registered_anew,
            BOOKIE_READY_TIMEOUT_S,
            lambda: "".join(log_tail(records[s.name].log, 8) for s in specs),
        )
