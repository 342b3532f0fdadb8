"""Integration fixtures: one real local cluster per session (ZooKeeper x3, six bookies, WAN).

A test that needs the tools and finds them missing fails: it never silently passes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from cli.cluster import controller, processes
from cli.cluster.controller import Cluster
from cli.cluster.probes import log_tail
from cli.cluster.processes import load_state
from cli.tools import Tools, find_tools
from core.topology_loader import load_topology
from tests.support.topologies import write_topology

LOG_LINES_ON_FAILURE = 25


@pytest.fixture(scope="session")
def tools() -> Tools:
    return find_tools()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, tools: Tools) -> Iterator[Cluster]:
    home = tmp_path_factory.mktemp("cluster")
    topology_path = write_topology(home)
    topology = load_topology(topology_path)
    cluster = Cluster(topology, topology_path, home / "data", "ci")
    try:
        asyncio.run(controller.up(cluster, tools))
        yield cluster
    finally:
        controller.down(cluster)


@pytest.fixture
async def services(cluster: Cluster, tools: Tools) -> AsyncIterator[Cluster]:
    """The session cluster with its write proxy processes, stopped again afterwards (other
    tests run proxies in-process on the same ports)."""
    with_services = dataclasses.replace(cluster, services=True)
    await controller.up(with_services, tools)
    try:
        yield with_services
    finally:
        records = processes.load_state(cluster.data_dir)
        for name, record in list(records.items()):
            if record.kind in ("write-proxy", "read-proxy"):
                if processes.run_state(record) is not processes.RunState.DEAD:
                    processes.stop(record)
                del records[name]
        processes.save_state(cluster.data_dir, records, processes.load_meta(cluster.data_dir))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing integration test shows the tail of every cluster process log."""
    outcome = yield
    report = outcome.get_result()
    funcargs = getattr(item, "funcargs", {})
    cluster = funcargs.get("cluster") or funcargs.get("services")
    if report.failed and isinstance(cluster, Cluster):
        for name, record in load_state(cluster.data_dir).items():
            tail = log_tail(record.log, LOG_LINES_ON_FAILURE)
            report.sections.append((f"log of {name} ({Path(record.log).name})", tail))
