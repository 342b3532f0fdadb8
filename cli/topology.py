"""Loads topology.yaml for the CLI: the loader's checks plus placement's layout check.

core's loader checks each write set; only placement knows whether E positions can be striped
over the regions at all (E/W/A 5/3/2 over three regions cannot), and core cannot import it.
"""

from __future__ import annotations

import os
from pathlib import Path

from cli.tools import REPO_ROOT
from core.errors import TopologyError
from core.topology import Topology
from core.topology_loader import load_topology, require_local
from placement import QuorumSettingsError, check_quorum

SYSTEM_TOPOLOGY = Path("/etc/globelog/topology.yaml")


def default_topology_path() -> Path:
    """$GLOBELOG_TOPOLOGY, else a source checkout's topology.yaml, else the installed
    system's /etc/globelog/topology.yaml (docs/deploy.md)."""
    named = os.environ.get("GLOBELOG_TOPOLOGY")
    if named:
        return Path(named)
    checkout = REPO_ROOT / "topology.yaml"
    return checkout if checkout.is_file() else SYSTEM_TOPOLOGY


def load_checked_topology(path: str | Path) -> Topology:
    topology = load_topology(path)
    try:
        check_quorum(topology.replication, len(topology.regions))
    except QuorumSettingsError as err:
        raise TopologyError(str(path), [f"replication: {p}" for p in err.problems]) from err
    return topology


def load_local_topology(path: str | Path) -> Topology:
    """A topology the local launcher can run: checked, loopback hosts only, with a WAN."""
    topology = load_checked_topology(path)
    require_local(topology, str(path))
    return topology
