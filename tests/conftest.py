"""Shared pytest configuration: layer markers are applied by directory."""

from __future__ import annotations

import asyncio
import os

import pytest
import uvloop
from hypothesis import settings

from tests.support import security

pytest_plugins = ["pytester", "tests.support.cluster_fixtures", "tests.support.task_leaks"]

# Hypothesis's default 200 ms deadline per example is a timed assertion: on two cores shared
# with the suite's clusters an example of a pure test took 326 ms once and failed the run.
# Speed is the benchmarks' to measure (docs/benchmarks.md), not the tests'.
settings.register_profile("globelog", deadline=None)
settings.load_profile("globelog")

LAYER_BY_DIRECTORY = {
    "unit": "unit",
    "scenario": "scenario",
    "simulation": "simulation",
    "contract": "contract",
    "integration": "integration",
    "e2e": "e2e",
    "spark": "spark",
    "multihost": "multihost",
}


# `make test` runs two pytest-xdist workers (`--dist loadgroup --no-loadscopereorder`). Each
# worker process has its own session cluster, started by the first test that asks for it. The
# tests that use it form two groups, each run by one worker in order, so two clusters serve
# them side by side; every other test file is a group of its own. Groups are handed out in
# the order of the items: the long ones first (the two cluster groups, then the tests that
# start clusters of their own: the demo, the hosts in namespaces, the CLI's cluster), so the
# many short unit files fill in behind them instead of a long test starting last.
CLUSTER_GROUPS = {
    # directory (under tests/) -> its cluster group; the rest of the cluster tests: "a"
    "contract": "session-cluster-b",  # `real_cluster` asks for the session cluster when run
    "integration/ledger": "session-cluster-b",
    "integration/streams": "session-cluster-b",
    "integration/rebuild": "session-cluster-b",
    "spark": "session-cluster-b",
}
CLUSTER_FIXTURES = {"cluster", "real_cluster"}
LONG_FIRST = (
    "session-cluster-a",
    "session-cluster-b",
    "tests/e2e/test_demo.py",
    "tests/multihost/",
    "tests/e2e/",
)


def pytest_configure(config: pytest.Config) -> None:
    security.set_up()  # every cluster of this process demands tokens; clients send the admin's


def _group(item: pytest.Item) -> str:
    relative = item.path.relative_to(item.config.rootpath).as_posix()
    if not CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return relative
    folder = relative.removeprefix("tests/").rsplit("/", 1)[0]
    return CLUSTER_GROUPS.get(folder, "session-cluster-a")


def _rank(group: str) -> int:
    return next((i for i, g in enumerate(LONG_FIRST) if group.startswith(g)), len(LONG_FIRST))


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.parts
        for directory, marker in LAYER_BY_DIRECTORY.items():
            if directory in parts and not item.get_closest_marker(marker):
                item.add_marker(getattr(pytest.mark, marker))
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(_group(item)))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the order groups are handed out in
        items.sort(key=lambda item: _rank(_group(item)))


@pytest.fixture(scope="session")
def event_loop_policy() -> asyncio.AbstractEventLoopPolicy:
    """Every async test runs on uvloop, the loop of globelog's processes (region/process/event_loop.py):
    what runs in a test's process (proxies, clients) meets the loop it meets in production."""
    return uvloop.EventLoopPolicy()
