"""Fault controls on the real local cluster: kill, restart, pause, resume."""

from __future__ import annotations

import pytest

from core.errors import ClusterError
from global_meta import MetaStore
from localcluster import controller
from localcluster.controller import Cluster
from localcluster.processes import RunState, load_state, run_state
from localcluster.tools import Tools


async def registration_owner(cluster: Cluster, bookie_id: str) -> int | None:
    async with await MetaStore.of(cluster.topology) as store:
        stat = await store.exists(f"/ledgers/available/{bookie_id}")
        return None if stat is None else stat.ephemeral_owner


async def test_status_reports_every_process_healthy(cluster: Cluster) -> None:
    report = await controller.status(cluster)
    assert report["healthy"], report
    # the rebuilders, when a test with services started them, stay for the session
    kinds = sorted(p["kind"] for p in report["processes"].values() if p["kind"] != "rebuilder")
    assert kinds == ["bookie"] * 6 + ["toxiproxy"] + ["zk-relay"] * 3 + ["zookeeper"] * 3
    modes = sorted(p["detail"] for p in report["processes"].values() if p["kind"] == "zookeeper")
    assert modes == ["mode follower", "mode follower", "mode leader"]
    kinds_of_routes = sorted(route["kind"] for route in report["wan"].values())
    # 3 regions x 4 remote bookies; 3 ZooKeeper nodes x 2 remote regions x (client, peer,
    # election)
    zk_routes = ["zk-client"] * 6 + ["zk-election"] * 6 + ["zk-peer"] * 6
    assert kinds_of_routes == ["bookie"] * 12 + zk_routes
    for route in report["wan"].values():
        link = cluster.topology.wan.link("ci", route["from_region"], route["to_region"])
        assert route["present"] and not route["partitioned"]
        assert route["one_way_ms"] == link.one_way_ms


async def test_killed_bookie_restarts_and_registers_with_a_new_session(
    cluster: Cluster, tools: Tools
) -> None:
    bookie = cluster.topology.bookies[0]
    before = await registration_owner(cluster, bookie.bookie_id)
    assert before is not None
    await controller.fault(cluster, tools, "kill", bookie.name)
    record = load_state(cluster.data_dir)[bookie.name]
    assert run_state(record) is RunState.DEAD
    status = await controller.status(cluster)
    assert status["processes"][bookie.name]["state"] == "dead"
    assert not status["healthy"]

    await controller.fault(cluster, tools, "restart", bookie.name)
    after = await registration_owner(cluster, bookie.bookie_id)
    assert after is not None and after != before
    assert (await controller.status(cluster))["healthy"]


async def test_pause_and_resume_a_bookie(cluster: Cluster, tools: Tools) -> None:
    bookie = cluster.topology.bookies[2]
    await controller.fault(cluster, tools, "pause", bookie.name)
    try:
        status = await controller.status(cluster)
        assert status["processes"][bookie.name]["state"] == "paused"
        assert not status["processes"][bookie.name]["healthy"]
    finally:
        await controller.fault(cluster, tools, "resume", bookie.name)
    status = await controller.status(cluster)
    assert status["processes"][bookie.name]["state"] == "running"


async def test_fault_on_unknown_process_is_a_clear_error(cluster: Cluster, tools: Tools) -> None:
    with pytest.raises(ClusterError, match="no process 'bk-nope'; known: \\["):
        await controller.fault(cluster, tools, "kill", "bk-nope")
