"""Loads topology.yaml for the CLI: the loader's checks plus placement's layout check.

core's loader checks each write set; only placement knows whether E positions can be striped
over the regions at all (E/W/A 5/3/2 over three regions cannot), and core cannot import it.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import TopologyError
from core.topology import Topology
from core.topology_loader import load_topology
from placement import QuorumSettingsError, check_quorum


def load_checked_topology(path: str | Path) -> Topology:
    topology = load_topology(path)
    try:
        check_quorum(topology.replication, len(topology.regions))
    except QuorumSettingsError as err:
        raise TopologyError(str(path), [f"replication: {p}" for p in err.problems]) from err
    return topology
