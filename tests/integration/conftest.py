"""Integration fixtures: one real local cluster per session (ZooKeeper x3, six bookies, WAN).

A test that needs the tools and finds them missing fails: it never silently passes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from global_meta import MetaStore
from localcluster import controller
from localcluster.controller import Cluster
from localcluster.probes import log_tail, wait_until
from localcluster.processes import load_state

LOG_LINES_ON_FAILURE = 25
SETTLE_TIMEOUT_S = 60.0


@pytest.fixture(autouse=True)
async def settled_after(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """After a test that cut or stopped parts of the cluster, waits until every bookie is
    registered writable again (a partition from ZooKeeper expires their sessions), so the
    next test starts on a whole cluster."""
    yield
    names = set(request.fixturenames)
    if not names & {"cluster", "services"}:
        return
    cluster: Cluster = request.getfixturevalue("cluster")
    wanted = {b.bookie_id for b in cluster.topology.bookies}
    async with await MetaStore.of(cluster.topology) as store:

        async def all_registered() -> bool:
            writable, _ = await controller.registered_bookies(store)
            return wanted <= writable

        await wait_until("every bookie registered again", all_registered, SETTLE_TIMEOUT_S)


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
