"""Whole-region faults of the local cluster: a region down and back, a region isolated.

A region down is every process of that region killed at once (its ZooKeeper node, bookies and
proxies), as in a data-centre outage; a region isolated keeps running but every WAN route
into and out of it, ZooKeeper's quorum traffic included, is cut until `heal`.
"""

from __future__ import annotations

import signal

from core.errors import ClusterError
from localcluster import plan, processes, wan
from localcluster.controller import (
    Cluster,
    load_records,
    restart_bookies,
    save_records,
    wait_services,
    wait_zookeeper,
)
from localcluster.probes import wait_until
from localcluster.processes import RunState
from localcluster.tools import Tools

KILL_SETTLE_TIMEOUT_S = 10.0
START_PHASES = (
    ("zookeeper", "zk-relay"),
    ("bookie",),
    ("write-proxy", "read-proxy", "rebuilder", "console"),
)


def _check_region(cluster: Cluster, region: str) -> None:
    known = cluster.topology.region_names
    if region not in known:
        raise ClusterError(f"region {region!r}: expected one of {list(known)}")


async def region_down(cluster: Cluster, region: str) -> list[str]:
    """SIGKILLs every running process of `region` and waits until all of them are gone."""
    _check_region(cluster, region)
    records = load_records(cluster)
    victims = [
        r
        for r in records.values()
        if r.region == region and processes.run_state(r) is not RunState.DEAD
    ]
    for record in victims:
        processes.signal_process(record, signal.SIGKILL)

    async def all_dead() -> bool:
        return all(processes.run_state(r) is RunState.DEAD for r in victims)

    await wait_until(f"region {region} down", all_dead, KILL_SETTLE_TIMEOUT_S)
    return [r.name for r in victims]


async def region_up(cluster: Cluster, tools: Tools, region: str) -> list[str]:
    """Restarts every process of `region` that is not running (ZooKeeper, then bookies, then
    proxies) and waits until each is serving again: ZooKeeper in the quorum, bookies
    registered by their new sessions, proxies answering /v1/health."""
    _check_region(cluster, region)
    specs = plan.plan_cluster(cluster.topology, cluster.data_dir, tools, cluster.lean_jvms)
    if cluster.services:
        specs += plan.plan_services(cluster.topology, cluster.topology_path, cluster.data_dir)
    records = load_records(cluster)
    started: list[str] = []
    for kinds in START_PHASES:
        chosen = [
            s
            for s in specs
            if s.kind in kinds
            and s.region == region
            and (s.name not in records or processes.run_state(records[s.name]) is RunState.DEAD)
        ]
        if not chosen:
            continue
        if kinds == ("bookie",):
            await restart_bookies(cluster, chosen)
        else:
            for spec in chosen:
                records[spec.name] = processes.start(spec)
            save_records(cluster, records)
            if "zookeeper" in kinds:
                await wait_zookeeper(cluster)
            else:
                await wait_services(cluster, chosen)
        records = load_records(cluster)
        started += [s.name for s in chosen]
    return started


async def isolate(cluster: Cluster, region: str) -> int:
    """Cuts every WAN route between `region` and the others; returns how many were cut."""
    _check_region(cluster, region)
    routes = wan.routes_of(cluster.topology, region)
    await wan.cut(cluster.topology, routes)
    return len(routes)
