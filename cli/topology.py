"""Where the CLI finds topology.yaml when no --topology is given."""

from __future__ import annotations

import os
from pathlib import Path

from localcluster.tools import REPO_ROOT

SYSTEM_TOPOLOGY = Path("/etc/globelog/topology.yaml")


def default_topology_path() -> Path:
    """$GLOBELOG_TOPOLOGY, else a source checkout's topology.yaml, else the installed
    system's /etc/globelog/topology.yaml (docs/deploy.md)."""
    named = os.environ.get("GLOBELOG_TOPOLOGY")
    if named:
        return Path(named)
    checkout = REPO_ROOT / "topology.yaml"
    return checkout if checkout.is_file() else SYSTEM_TOPOLOGY
