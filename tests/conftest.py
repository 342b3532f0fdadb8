"""Shared pytest configuration: layer markers are applied by directory."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester", "tests.support.cluster_fixtures", "tests.support.task_leaks"]

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.parts
        for directory, marker in LAYER_BY_DIRECTORY.items():
            if directory in parts and not item.get_closest_marker(marker):
                item.add_marker(getattr(pytest.mark, marker))
