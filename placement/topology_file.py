"""Loads topology.yaml with every check: core's loader, then the layout check only placement
can make (E positions striped over the regions so each write set keeps the region rule;
E/W/A 5/3/2 over three regions passes every per-write-set test and still has no layout)."""

from __future__ import annotations

from pathlib import Path

from core.errors import TopologyError
from core.topology import Topology
from core.topology_loader import load_topology
from placement.errors import QuorumSettingsError
from placement.quorum import check_quorum


def load_checked_topology(path: str | Path) -> Topology:
    """The topology at `path`, or TopologyError listing every problem with its YAML path."""
    topology = load_topology(path)
    try:
        check_quorum(topology.replication, len(topology.regions))
    except QuorumSettingsError as err:
        raise TopologyError(str(path), [f"replication: {p}" for p in err.problems]) from err
    return topology
