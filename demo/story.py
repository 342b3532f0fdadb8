"""`make demo`: a local three-region cluster brought up, shown, faulted, healed and torn down."""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from core.errors import ClusterError, GlobelogError
from core.routes import plan_routes
from core.security.credentials import bookie_tls
from core.topology_loader import region_loss_summary
from demo.ledger import ledger_demo
from demo.services import NAMESPACE, STREAM, print_summary, services_demo
from ledger import ping_bookie
from localcluster import controller
from localcluster.controller import Cluster
from localcluster.tools import REPO_ROOT, find_tools
from localcluster.topology_files import load_local_topology

DEMO_TOPOLOGY = REPO_ROOT / "topology.yaml"
DEMO_DATA_DIR = REPO_ROOT / ".cluster-demo"
DEMO_PROFILE = "realistic"
PINGS_PER_LINK = 7
PORT_PROBE_TIMEOUT_S = 0.5
# The story shows the warnings of the drivers it runs (a bookie unreachable while its region is
# down is part of it); the libraries' own logs (the ZooKeeper client reconnecting) are not.
SHOWN_LOGGERS = frozenset({"ledger", "global_meta", "region", "reader", "writer"})


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
    tls = bookie_tls(cluster.topology.security)
    for source in regions:
        cells = []
        for target in regions:
            if source == target:
                address = bookie_id = cluster.topology.region(target).bookies[0].bookie_id
            else:
                route = next(
                    r
                    for r in routes
                    if r.kind == "bookie" and (r.from_region, r.to_region) == (source, target)
                )
                address, bookie_id = route.listen.address, route.upstream.address
            samples = [
                await ping_bookie(address, tls=tls, bookie_id=bookie_id)
                for _ in range(PINGS_PER_LINK)
            ]
            median_ms = statistics.median(samples[2:]) * 1000  # first pings warm the bookie
            link = (
                "local"
                if source == target
                else f"{cluster.topology.emulated_wan.link(DEMO_PROFILE, source, target).one_way_ms:.0f} ms x2"
            )
            cells.append(f"{median_ms:7.1f} ms ({link})")
        print(f"  {source:<10}" + "".join(f"{c:>18}" for c in cells))


def _answering(cluster: Cluster) -> list[str]:
    """The topology's ZooKeeper, bookie and proxy addresses that something answers at."""
    topology = cluster.topology
    endpoints = [n.client for n in topology.zookeeper] + [b.endpoint for b in topology.bookies]
    for region in topology.regions:
        endpoints += [p.endpoint for p in (*region.write_proxies, *region.read_proxies)]
    answering = []
    for endpoint in endpoints:
        try:
            with socket.create_connection(
                (endpoint.host, endpoint.port), timeout=PORT_PROBE_TIMEOUT_S
            ):
                answering.append(endpoint.address)
        except OSError:
            pass
    return answering


def _fresh_start(cluster: Cluster) -> None:
    """The story begins on a new cluster: an earlier demo's leftovers in the data dir (one cut
    short keeps its logs there) are stopped and removed. Then the ports must be free: the demo
    must not adopt, and at its end tear down, a cluster someone else runs on them."""
    if cluster.data_dir.exists():
        stopped = controller.down(cluster, purge=True)
        print(f"  removed an earlier demo's {cluster.data_dir.name}/ ({len(stopped)} running)")
    taken = _answering(cluster)
    if taken:
        raise ClusterError(
            f"demo: the ports of {cluster.topology_path} are in use ({', '.join(taken[:4])}"
            f"{', ...' if len(taken) > 4 else ''}): another cluster or demo runs on them. "
            "Stop it (`globelog cluster down`), or give the demo another topology: "
            "python -m demo --topology FILE --data-dir DIR"
        )


async def demo(topology_path: Path, data_dir: Path) -> None:
    topology = load_local_topology(topology_path)
    cluster = Cluster(topology, topology_path, data_dir, DEMO_PROFILE, services=True)
    picture = data_dir.parent / f"demo-report-{STREAM}.png"
    tools = find_tools()
    told = False
    step(f"cluster up ({topology_path.name}, WAN profile {DEMO_PROFILE}, with every proxy)")
    _fresh_start(cluster)
    try:
        report = await controller.up(cluster, tools)
        print(f"  up in {report.total_s:.1f} s; {region_loss_summary(cluster.topology)}")
        security = cluster.topology.security
        if security.tokens:  # cluster up made the operator's token; the demo acts with it
            print(
                f"  every proxy endpoint demands a token and speaks HTTPS only; the operator's "
                f"token is {security.admin_token}"
            )
        for region in cluster.topology.regions:
            for console in region.consoles:
                print(
                    f"  web console ({console.region}): {cluster.topology.proxy_url(console)} "
                    "(sign in with the operator's token; it runs until the demo ends)"
                )
        await show_status(cluster)

        step("WAN: median GET_BOOKIE_INFO round trip between regions (one-way latency x2 + bookie)")
        await wan_matrix(cluster)

        step("ledger: region-aware placement, reads from every region, recovery from another")
        await ledger_demo(cluster, writer_region="us-east", recovery_region="eu-west")

        step(
            "stream 'orders': written from us-east through the write proxies, tailed in every "
            "region through its read proxy; the owning proxy killed; us-west down and back"
        )
        summary = await services_demo(cluster, tools, picture)

        step("summary")
        print_summary(summary)
        print(f"  the story in a picture: {summary['picture']}")
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

        archive = data_dir / "archive"
        await asyncio.to_thread(pipeline_demo, cluster, NAMESPACE, STREAM, archive)
        told = True
    finally:
        step("cluster down")
        # A story cut short keeps the servers' logs, for whoever reports it.
        stopped = controller.down(cluster, purge=told)
        kept = f"removed {data_dir.name}/" if told else f"their logs are in {data_dir / 'logs'}"
        print(f"  stopped {len(stopped)} processes; {kept}")


def _show_driver_warnings() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("  (log) %(name)s: %(message)s"))
    handler.addFilter(lambda record: record.name.partition(".")[0] in SHOWN_LOGGERS)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__)
    parser.add_argument(
        "--topology", type=Path, default=DEMO_TOPOLOGY, help=f"default {DEMO_TOPOLOGY}"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEMO_DATA_DIR,
        help=f"the demo cluster's, removed at the end (default {DEMO_DATA_DIR}); the "
        "picture goes next to it",
    )
    args = parser.parse_args(argv)
    _show_driver_warnings()
    try:
        asyncio.run(demo(args.topology.resolve(), args.data_dir.resolve()))
    except GlobelogError as err:
        print(f"demo failed [{err.code}]: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
