"""The topologies the local launcher can run: fully checked, loopback hosts only, with a WAN."""

from __future__ import annotations

from pathlib import Path

from core.topology import Topology
from core.topology_loader import require_local
from placement import load_checked_topology


def load_local_topology(path: str | Path) -> Topology:
    """The topology at `path`, checked as every command checks it, and runnable here."""
    topology = load_checked_topology(path)
    require_local(topology, str(path))
    return topology
