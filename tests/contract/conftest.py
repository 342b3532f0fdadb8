"""The contract cases run twice: `sim` (the simulated component) and `real` (the session's
real cluster, started outside any event loop)."""

from __future__ import annotations

import pytest

from localcluster.controller import Cluster


@pytest.fixture(params=["sim", "real"])
def real_cluster(request: pytest.FixtureRequest) -> Cluster | None:
    return request.getfixturevalue("cluster") if request.param == "real" else None
