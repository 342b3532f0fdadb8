"""Cutting the ZooKeeper election links that do not cross the emulated WAN.

Every ZooKeeper node of the local cluster dials its peers through its region's WAN routes
(`plan.through_wan`), but one kind of election connection bypasses them: when a node with a
lower id connects to one with a higher id, the higher one drops it and connects back to the
election address the lower one advertised about itself, which is its own listener, not a
route. Those connections never cross toxiproxy, so disabling the routes between two regions
left them up: in a run that isolated the region of the ZooKeeper leader, the other two nodes
kept hearing it announce itself the leader, followed it, could not reach its quorum port (that
is routed), and went round that loop until the heal (9-10 s without a leader instead of the
second or two a real cut gives).

A cut therefore also resets the established election connections between the nodes it
separates (`ss -K`, which destroys a socket by its ports). New ones cannot form while it lasts:
the connect-back only follows a connection that came through a route, and those are refused.
"""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from core import children
from core.routes import Route
from core.topology import Topology

log = logging.getLogger(__name__)

SS_TIMEOUT_S = 5.0
# `ss -tnpH` line: state, queues, local, peer, users:(("java",pid=123,fd=4))
_SOCKET = re.compile(
    r"(?P<local>\S+):(?P<sport>\d+)\s+(?P<peer>\S+):(?P<dport>\d+)\s+.*pid=(?P<pid>\d+)"
)
_ZOO_CFG = re.compile(r"/zookeeper/(?P<node>[^/\x00]+)/zoo\.cfg")


def separated_nodes(topology: Topology, routes: Iterable[Route]) -> set[frozenset[str]]:
    """The pairs of ZooKeeper nodes (by name) whose election links `routes` cut (the local
    cluster has one node per region)."""
    by_region = {node.region: node.name for node in topology.zookeeper}
    return {
        frozenset((by_region[route.from_region], route.target))
        for route in routes
        if route.kind == "zk-election" and route.from_region in by_region
    }


def node_of_process(pid: int) -> str | None:
    """The ZooKeeper node a process runs, from the zoo.cfg on its command line."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return None
    found = _ZOO_CFG.search(cmdline)
    return found["node"] if found else None


def bypassing_sockets(
    topology: Topology,
    pairs: set[frozenset[str]],
    ss_output: str,
    node_of: Callable[[int], str | None] = node_of_process,
) -> list[tuple[int, int]]:
    """(local port, election port) of each established connection from one node of a pair
    straight to the other's election port, as `ss -tnpH` lists them (`node_of`: the node a
    process id runs)."""
    election_ports = {node.election_port: node.name for node in topology.zookeeper}
    found = []
    for line in ss_output.splitlines():
        match = _SOCKET.search(line)
        if match is None or not match["peer"].strip("[]").endswith("127.0.0.1"):
            continue
        target = election_ports.get(int(match["dport"]))
        source = node_of(int(match["pid"]))
        if target is not None and source is not None and frozenset((source, target)) in pairs:
            found.append((int(match["sport"]), int(match["dport"])))
    return found


async def established_sockets() -> str | None:
    """`ss -tnpH state established`: every established TCP connection with its process."""
    return await _run("ss", "-tnpH", "state", "established")


async def cut_bypasses(topology: Topology, routes: Iterable[Route]) -> int:
    """Resets the direct election connections between the nodes `routes` separate; how many.
    Without `ss -K` (not root, or a kernel without socket destruction) it logs why and
    leaves them: the cut then lets election traffic through, as before."""
    pairs = separated_nodes(topology, routes)
    if not pairs:
        return 0
    listed = await established_sockets()
    if listed is None:
        return 0
    cut = 0
    for sport, dport in bypassing_sockets(topology, pairs, listed):
        killed = await _run(
            "ss", "-K", "-tnH", "sport", "=", f":{sport}", "dport", "=", f":{dport}"
        )
        if killed is None:
            break
        cut += 1
    return cut


async def _run(*argv: str) -> str | None:
    """`argv`'s output, or None (logged) when it could not run, failed or took too long. Run
    by `core.children`, off the loop's pipe transports (see there)."""
    try:
        done = await children.run(argv, SS_TIMEOUT_S)
    except OSError as failed:
        log.warning("cannot cut ZooKeeper's direct election links (%s): %r", " ".join(argv), failed)
        return None
    except subprocess.TimeoutExpired:
        log.warning("cannot cut ZooKeeper's direct election links: %s took over %s s",
                    " ".join(argv), SS_TIMEOUT_S)  # fmt: skip
        return None
    # `ss -K` exits 0 when the kernel refused to destroy a socket (not root: "SOCK_DESTROY
    # answers: Operation not permitted"; no socket destruction in the kernel): its stderr
    # says so
    if done.returncode != 0 or done.stderr.strip():
        log.warning(
            "cannot cut ZooKeeper's direct election links: %s exited %s: %s",
            " ".join(argv), done.returncode, done.stderr.decode(errors="replace").strip()[:200],
        )  # fmt: skip
        return None
    return done.stdout.decode(errors="replace")
