"""The session's real local cluster (ZooKeeper x3, six bookies, WAN emulation), shared by the
integration and Spark tests (registered in tests/conftest.py).

A test that needs the tools and finds them missing fails: it never silently passes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator

import pytest

from core.topology_loader import load_topology
from localcluster import controller, processes
from localcluster.controller import Cluster
from localcluster.tools import Tools, find_tools
from tests.support.topologies import write_topology


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
    """The session cluster with its proxy processes, stopped again afterwards (other tests
    run proxies in-process on the same ports). Its rebuilders, which have no port, stay up
    for the session once started."""
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
