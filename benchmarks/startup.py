"""`globelog bench startup`: how long `cluster up` takes on a fresh data dir, over several runs."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from core.topology import Topology
from localcluster import controller
from localcluster.controller import Cluster
from localcluster.tools import Tools


async def bench_startup(topology: Topology, topology_path: Path, tools: Tools, runs: int) -> str:
    """Runs up + down `runs` times on fresh data dirs; returns a printable report."""
    totals: list[float] = []
    phases: dict[str, list[float]] = {}
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="globelog-bench-") as home:
            cluster = Cluster(
                topology, topology_path, Path(home) / "data", topology.emulated_wan.default_profile
            )
            try:
                report = await controller.up(cluster, tools)
            finally:
                controller.down(cluster, purge=True)
        totals.append(report.total_s)
        for name, seconds in report.phases_s.items():
            phases.setdefault(name, []).append(seconds)
    layout = (
        f"{len(topology.zookeeper)} ZooKeeper JVMs, {len(topology.bookies)} bookie JVMs, "
        "1 toxiproxy, all on this machine"
    )
    lines = [f"cluster up, fresh data dir, {runs} runs ({layout})"]
    for name, values in phases.items():
        lines.append(
            f"  {name:<14} median {statistics.median(values):6.1f} s  "
            f"min {min(values):6.1f} s  max {max(values):6.1f} s"
        )
    return "\n".join(lines)
