"""`make demo`: a local three-region cluster brought up, shown, faulted, healed and torn down."""

from __future__ import annotations

import asyncio
import logging
import statistics
import sys
from pathlib import Path

from core.errors import ClusterError, GlobelogError
from core.routes import plan_routes
from core.topology_loader import region_loss_summary
from demo.ledger import ledger_demo
from demo.services import NAMESPACE, STREAM, print_summary, services_demo
from ledger import ping_bookie
from localcluster import controller
from localcluster.controller import Cluster
from localcluster.tools import REPO_ROOT, find_tools
from localcluster.topology_files import load_local_topology

DEMO_DATA_DIR = REPO_ROOT / ".cluster-demo"
DEMO_PROFILE = "realistic"
PINGS_PER_LINK = 7


def step(title: str) -> None:
    print(f"\n== {title}")


async def show_status(cluster: Cluster) -> None:
    report = await controller.status(cluster)
    for name, proc in sorted(report["processes"].items()):
        mark = "ok " if proc["healthy"] else "BAD"
        print(f"  {mark} {proc['kind']:<9} {name:<10} {proc['region'] or '-':<8} {proc['detail']}")
    print(f"  cluster healthy: {report['healthy']}")


async def wan_matrix(cluster: Cluster) -> None:
    """Median request round trip from each region to one bookie of every other region."""
    routes = plan_routes(cluster.topology)
    regions = cluster.topology.region_names
    corner = "from/to"
    print(f"  {corner:<10}" + "".join(f"{r:>22}" for r in regions))
    for source in regions:
        cells = []
        for target in regions:
            if source == target:
                address = cluster.topology.region(target).bookies[0].bookie_id
            else:
                address = next(
                    r.listen.address
                    for r in routes
                    if r.kind == "bookie" and (r.from_region, r.to_region) == (source, target)
                )
            samples = [await ping_bookie(address) for _ in range(PINGS_PER_LINK)]
            median_ms = statistics.median(samples[2:]) * 1000  # first pings warm the bookie
            link = (
                "local"
                if source == target
                else f"{cluster.topology.emulated_wan.link(DEMO_PROFILE, source, target).one_way_ms:.0f} ms x2"
            )
            cells.append(f"{median_ms:7.1f} ms ({link})")
        print(f"  {source:<10}" + "".join(f"{c:>18}" for c in cells))


async def demo() -> None:
    topology_path = REPO_ROOT / "topology.yaml"
    topology = load_local_topology(topology_path)
    cluster = Cluster(topology, topology_path, DEMO_DATA_DIR, DEMO_PROFILE, services=True)
    tools = find_tools()
    try:
        step(f"cluster up ({topology_path.name}, WAN profile {DEMO_PROFILE}, with every proxy)")
        report = await controller.up(cluster, tools)
        print(f"  up in {report.total_s:.1f} s; {region_loss_summary(cluster.topology)}")
        await show_status(cluster)

        step("WAN: median GET_BOOKIE_INFO round trip between regions (one-way latency x2 + bookie)")
        await wan_matrix(cluster)

        step("ledger: region-aware placement, reads from every region, recovery from another")
        await ledger_demo(cluster, writer_region="us-east", recovery_region="eu-west")

        step(
            "stream 'orders': written from us-east through the write proxies, tailed in every "
            "region through its read proxy; the owning proxy killed; us-west down and back"
        )
        summary = await services_demo(cluster, tools)

        step("summary")
        print_summary(summary)
        lost = sum(row["lost"] for row in summary["regions"].values())
        duplicated = sum(row["duplicated"] for row in summary["regions"].values())
        if lost or duplicated or not summary["audit_ok"]:
            raise ClusterError(
                f"demo: {lost} records lost, {duplicated} duplicated, audit ok "
                f"{summary['audit_ok']}: this is a bug, please report it"
            )

        step(
            f"pipeline: {STREAM!r} on Spark: read with the data source, archived to Parquet, "
            "ledgers deleted by retention, read again; the throughput report"
        )
        from demo.pipeline import pipeline_demo

        archive = DEMO_DATA_DIR / "archive"
        await asyncio.to_thread(pipeline_demo, cluster, NAMESPACE, STREAM, archive)
    finally:
        step("cluster down")
        stopped = controller.down(cluster, purge=True)
        print(f"  stopped {len(stopped)} processes; removed {Path(DEMO_DATA_DIR).name}/")


def main() -> int:
    # Warnings from the drivers (a partitioned link, a failed connection) are part of the show.
    logging.basicConfig(level=logging.WARNING, format="  (log) %(name)s: %(message)s")
    try:
        asyncio.run(demo())
    except GlobelogError as err:
        print(f"demo failed [{err.code}]: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
