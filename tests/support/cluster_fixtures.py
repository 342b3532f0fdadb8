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


# Set as each test ends (before its fixtures are torn down): whether the test run next on
# this worker asks for `services` too.
NEXT_WANTS_SERVICES = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    wanted = nextitem is not None and "services" in getattr(nextitem, "fixturenames", ())
    item.config.stash[NEXT_WANTS_SERVICES] = wanted


@pytest.fixture
async def services(
    cluster: Cluster, tools: Tools, request: pytest.FixtureRequest
) -> AsyncIterator[Cluster]:
    """The session cluster with its proxy processes. They stay up when the next test wants
    them too (starting them is most of such a test's set-up; one that faulted them is healed
    by the next start, which restarts what is gone); otherwise they are stopped (other tests
    run proxies in-process on the same ports, or expect none). Its rebuilders, which have no
    port, stay up for the session once started."""
    with_services = dataclasses.replace(cluster, services=True)
    await controller.up(with_services, tools)
    try:
        yield with_services
    finally:
        if not request.config.stash.get(NEXT_WANTS_SERVICES, False):
            stop_proxies(cluster)


@pytest.fixture
async def fresh_services(services: Cluster, tools: Tools) -> Cluster:
    """`services` with proxies started anew for the test: no stream of an earlier test is
    still owned (an idle owned stream keeps its segment's ledger open, with its ensemble,
    until stream_idle_release_s)."""
    stop_proxies(services)
    await controller.up(services, tools)
    return services


def stop_proxies(cluster: Cluster) -> None:
    """Stops the cluster's proxy processes and forgets them."""
    records = processes.load_state(cluster.data_dir)
    for name, record in list(records.items()):
        if record.kind in ("write-proxy", "read-proxy"):
            if processes.run_state(record) is not processes.RunState.DEAD:
                processes.stop(record)
            del records[name]
    processes.save_state(cluster.data_dir, records, processes.load_meta(cluster.data_dir))
