"""The `globelog` command line: parses flags, wires components, prints results."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import dl as bench_dl
from benchmarks import failover as bench_failover
from benchmarks import harness as bench_ledger_options
from benchmarks import reads as bench_reads
from benchmarks import stream_command as bench_stream_main
from benchmarks.console import bench as bench_console
from benchmarks.proxies import abuse as bench_abuse
from benchmarks.proxies import throughput as bench_proxy
from benchmarks.rebuild import bench as bench_rebuild
from benchmarks.spark import bench as bench_spark
from cli import (
    console_logs,
    deploy,
    failover_main,
    reach,
    rebuild_main,
    region_main,
    security_main,
    serve,
    spark_main,
    stream_args,
)
from cli.topology import default_topology_path
from core.errors import (
    ConfigError,
    GlobelogError,
    MetadataUnavailableError,
    OutcomeUnknownError,
)
from core.security.credentials import (
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    adopt_operator_credentials,
    read_token_file,
)
from core.topology import Topology
from core.topology_loader import (
    load_topology,
    region_loss_summary,
    region_loss_warning,
    zookeeper_warning,
)
from localcluster import controller, processes, regions, wan
from localcluster.controller import Cluster
from localcluster.tools import REPO_ROOT, find_tools
from localcluster.topology_files import load_local_topology
from placement import load_checked_topology

# A write whose outcome is unknown is not a failure like the others: it may have landed.
EXIT_OUTCOME_UNKNOWN = 4
OUTCOME_UNKNOWN_ADVICE = (
    "globelog: the write's outcome is unknown: it may or may not have been appended (its answer "
    "was lost, or its writer failed after taking it). Lines acknowledged above were written; "
    "read the stream to see whether the rest were."
)

# `globelog bench NAME`: what it measures, and its module (add_arguments and run)
BENCHES: dict[str, tuple[str, Any]] = {
    "stream": ("stream write throughput, commit latency and tailing reads", bench_stream_main),
    "failover": ("time from killing a stream's owning write proxy to the next write", bench_failover),
    "proxy": ("write-proxy throughput, commit latency and delivery to every region", bench_proxy),
    "abuse": ("hostile clients against a region's proxies while a canary is served", bench_abuse),
    "rebuild": ("a lost bookie's copies re-made: globelog's rebuilders and BookKeeper's", bench_rebuild),
    "reads": ("catch-up reads of a ledger, beside BookKeeper's Java read benchmark", bench_reads),
    "dl": ("globelog's library beside DistributedLog's on the same bookies", bench_dl),
    "spark": ("the globelog data source's read throughput against a Parquet scan", bench_spark),
    "console": ("the web console's server time for its heaviest pages", bench_console),
}  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="globelog", description="A multi-region replicated log.")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="show the libraries' logs too (ZooKeeper client, HTTP, Spark); -vv for debug",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="the access token to send (default: $GLOBELOG_TOKEN, $GLOBELOG_TOKEN_FILE, else "
        "the deployment's admin token when this host holds it)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    topo = commands.add_parser("topology", help="inspect a topology file")
    topo_sub = topo.add_subparsers(dest="action", required=True)
    check = topo_sub.add_parser("check", help="validate a topology file and summarise it")
    check.add_argument("file", nargs="?", default=None)

    bench = commands.add_parser("bench", help="benchmarks that print their figures")
    bench_sub = bench.add_subparsers(dest="action", required=True)
    startup = bench_sub.add_parser("startup", help="time `cluster up` on fresh data dirs")
    startup.add_argument("--topology", default=None)
    startup.add_argument("--runs", type=int, default=3)
    ledger = bench_sub.add_parser(
        "ledger", help="ledger add throughput and latency, beside BookKeeper's Java benchmark"
    )
    bench_ledger_options.add_arguments(ledger)
    for name, (help_text, module) in BENCHES.items():
        module.add_arguments(bench_sub.add_parser(name, help=help_text))

    _add_ledger_commands(commands)

    stream_args.add_stream_commands(commands)
    spark_main.add_spark_commands(commands)
    failover_main.add_failover_commands(commands)
    serve.add_arguments(commands)
    rebuild_main.add_arguments(commands)
    region_main.add_arguments(commands)
    security_main.add_arguments(commands)
    deploy.add_arguments(commands, default_topology_path())

    _add_cluster_commands(commands)
    return parser


def _add_cluster_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = commands.add_parser("cluster", help="the local multi-region cluster")
    cluster.add_argument("--topology", default=os.environ.get("GLOBELOG_TOPOLOGY"))
    cluster.add_argument("--data-dir", default=os.environ.get("GLOBELOG_DATA_DIR"))
    actions = cluster.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="start (or complete) the cluster; idempotent")
    up.add_argument(
        "--no-services",
        action="store_true",
        help="only ZooKeeper, the WAN and the bookies (no write proxies)",
    )
    up.add_argument("--profile", choices=None, default=None, help="WAN profile, e.g. ci|realistic")
    status = actions.add_parser("status", help="every process and its health")
    status.add_argument("--json", action="store_true")
    down = actions.add_parser("down", help="stop exactly what `up` started")
    down.add_argument("--purge", action="store_true", help="also remove the data dir")
    for action in ("kill", "pause", "resume", "restart"):
        actions.add_parser(action, help=f"{action} one process by name").add_argument("name")
    actions.add_parser(
        "wipe", help="kill a bookie and delete its data and cookie (restart brings it up empty)"
    ).add_argument("name")
    actions.add_parser(
        "expire-session", help="make ZooKeeper expire a write proxy's session (its streams go)"
    ).add_argument("name")
    part = actions.add_parser("partition", help="cut the WAN link between two regions")
    part.add_argument("region_a")
    part.add_argument("region_b")
    for action, text in (
        ("region-down", "kill every process of a region (ZooKeeper node, bookies, proxies)"),
        ("region-up", "restart every stopped process of a region and wait until it serves"),
        ("isolate", "cut every WAN link of a region, ZooKeeper's included (`heal` restores)"),
    ):
        actions.add_parser(action, help=text).add_argument("region")
    heal = actions.add_parser("heal", help="restore WAN links (all, or between two regions)")
    heal.add_argument("region_a", nargs="?")
    heal.add_argument("region_b", nargs="?")
    slow = actions.add_parser(
        "slow",
        help="add latency on every WAN route to a bookie or ZooKeeper node (`unslow` ends it)",
    )
    slow.add_argument("name")
    slow.add_argument(
        "--ms", type=int, default=500, help="extra one-way milliseconds (default 500)"
    )
    unslow = actions.add_parser("unslow", help="remove `slow` (from one node, or from all)")
    unslow.add_argument("name", nargs="?")


def _add_ledger_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ledger = commands.add_parser("ledger", help="inspect ledgers in the cluster's metadata")
    ledger.add_argument("--topology", default=os.environ.get("GLOBELOG_TOPOLOGY"))
    ledger_sub = ledger.add_subparsers(dest="action", required=True)
    for name, text in (("show", "a ledger's metadata"), ("audit", "placement adherence")):
        sub = ledger_sub.add_parser(name, help=text)
        sub.add_argument("ledger_ids", nargs="+", type=int, metavar="LEDGER_ID")
        sub.add_argument("--json", action="store_true")


def _cluster(args: argparse.Namespace) -> Cluster:
    data_dir = Path(args.data_dir or REPO_ROOT / ".cluster").resolve()
    meta = processes.load_meta(data_dir)
    topology_path = Path(args.topology or meta.get("topology") or REPO_ROOT / "topology.yaml")
    topology = load_local_topology(topology_path)
    profile = (
        getattr(args, "profile", None)
        or meta.get("profile")
        or topology.emulated_wan.default_profile
    )
    if profile not in topology.emulated_wan.profiles:
        raise ConfigError(
            f"--profile {profile!r}: expected one of {sorted(topology.emulated_wan.profiles)}"
        )
    services = not getattr(args, "no_services", False)
    return Cluster(topology, topology_path.resolve(), data_dir, profile, services)


def _print_status(report: dict[str, Any]) -> None:
    print(f"cluster {report['topology']} (profile {report['profile']}, data {report['data_dir']})")
    for name, proc in report["processes"].items():
        mark = "ok " if proc["healthy"] else "BAD"
        print(
            f"  {mark} {proc['kind']:<9} {name:<12} {proc['region'] or '-':<8} "
            f"pid {proc['pid']:<7} {proc['state']:<7} {proc['detail']}"
        )
    for name, route in report["wan"].items():
        cut = "  PARTITIONED" if route["partitioned"] else ""
        print(
            f"  wan {name:<24} {route['listen']} -> {route['upstream']} "
            f"{route['one_way_ms']}±{route['jitter_ms']} ms one way{cut}"
        )
    print("healthy" if report["healthy"] else "NOT healthy")


async def _run_cluster(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if args.action == "up":
        up = await controller.up(cluster, find_tools())
        phases = ", ".join(f"{k} {v:.1f} s" for k, v in up.phases_s.items() if k != "total")
        print(
            f"cluster up in {up.total_s:.1f} s ({phases}); started {len(up.started)}, "
            f"already running {len(up.already_running)}"
        )
        _print_region_loss(cluster.topology)
        return 0
    if args.action == "status":
        report = await controller.status(cluster)
        if args.json:
            print(json.dumps(report, indent=1, sort_keys=True))
        else:
            _print_status(report)
        return 0 if report["healthy"] else 3
    if args.action == "down":
        stopped = controller.down(cluster, purge=args.purge)
        print(f"stopped {len(stopped)} process(es): {' '.join(stopped) or '-'}")
        return 0
    if args.action in ("kill", "pause", "resume", "restart"):
        print(await controller.fault(cluster, find_tools(), args.action, args.name))
        return 0
    if args.action == "expire-session":
        print(await controller.expire_session(cluster, args.name))
        return 0
    if args.action == "wipe":
        print(await controller.wipe_bookie(cluster, args.name))
        return 0
    if args.action in ("region-down", "region-up", "isolate"):
        return await _run_region_fault(cluster, args.action, args.region)
    if args.action == "slow":
        routes = await wan.slow(cluster.topology, args.name, args.ms)
        print(f"slowed {args.name} by {args.ms} ms each way on {len(routes)} WAN routes")
        return 0
    if args.action == "unslow":
        routes = await wan.unslow(cluster.topology, args.name)
        print(f"removed slowness from {len(routes)} WAN routes")
        return 0
    known = set(cluster.topology.region_names)
    for region in (args.region_a, args.region_b):
        if region is not None and region not in known:
            raise ConfigError(f"region {region!r}: expected one of {sorted(known)}")
    if args.action == "partition":
        routes = await wan.partition(cluster.topology, args.region_a, args.region_b)
        print(f"partitioned {args.region_a} <-> {args.region_b} ({len(routes)} routes)")
        return 0
    routes = await wan.heal(cluster.topology, args.region_a, args.region_b)
    print(f"healed {len(routes)} routes")
    return 0


async def _run_region_fault(cluster: Cluster, action: str, region: str) -> int:
    if action == "region-down":
        names = await regions.region_down(cluster, region)
        print(f"region {region} down: killed {len(names)} process(es): {' '.join(names) or '-'}")
    elif action == "region-up":
        names = await regions.region_up(cluster, find_tools(), region)
        print(f"region {region} up: started {len(names)} process(es): {' '.join(names) or '-'}")
    else:
        cut = await regions.isolate(cluster, region)
        print(f"isolated {region}: {cut} routes cut, ZooKeeper's included (`heal` restores)")
    return 0


def _run_bench(args: argparse.Namespace) -> int:
    from benchmarks.startup import bench_startup

    if args.action == "ledger":
        return _run_bench_ledger(args)
    if args.action in BENCHES:
        return int(BENCHES[args.action][1].run(args))
    if not 1 <= args.runs <= 20:
        raise ConfigError(f"--runs {args.runs}: expected 1..20")
    path = Path(args.topology or REPO_ROOT / "topology.yaml")
    print(asyncio.run(bench_startup(load_checked_topology(path), path, find_tools(), args.runs)))
    return 0


def _run_bench_ledger(args: argparse.Namespace) -> int:
    from benchmarks.ledger import bench_ledger

    options = bench_ledger_options.parse_options(args)
    bench_ledger_options.check_cluster_ports(options.cluster, options.use_running)
    report = asyncio.run(
        bench_ledger(
            options.cluster,
            find_tools(),
            options.workload,
            options.replication,
            use_running=options.use_running,
            warmup_max_s=options.warmup_max_s,
            progress=lambda line: print(f"globelog bench ledger: {line}", file=sys.stderr),
        )
    )
    print(report)
    return 0


def _run_ledger(args: argparse.Namespace) -> int:
    from cli.ledger_commands import print_audit
    from global_meta import MetaStore
    from ledger import audit_ledgers

    topology = load_checked_topology(args.topology or default_topology_path())
    min_regions = topology.replication.min_regions_for_durability

    async def audit() -> tuple[list[dict[str, Any]], bool]:
        await reach.require_zookeeper(topology)
        async with await MetaStore.of(topology) as store:
            return await audit_ledgers(store, args.ledger_ids, min_regions)

    reports, all_adhere = asyncio.run(audit())
    if args.action == "show":
        for entry in reports:
            entry.pop("audit")
        print(json.dumps(reports, indent=1, sort_keys=True))
        return 0
    print_audit(reports, args.json)
    return 0 if all_adhere else 4


def _print_region_loss(topology: Topology) -> None:
    print(region_loss_summary(topology))
    for warning in (region_loss_warning(topology), zookeeper_warning(topology)):
        if warning is not None:
            print(f"globelog: {warning}", file=sys.stderr)


def _adopt_token(args: argparse.Namespace) -> None:
    """The token this command (and what it starts) sends: --token-file, else the
    environment's, else the admin token of the topology's deployment if this host holds it."""
    if args.token_file is not None:
        read_token_file(args.token_file, "--token-file")  # refused now if it cannot be read
        os.environ[TOKEN_FILE_ENV] = str(args.token_file.resolve())
        os.environ.pop(TOKEN_ENV, None)  # the one named on the command line wins
        return
    topology = getattr(args, "topology", None) or default_topology_path()
    with contextlib.suppress(GlobelogError):  # the command reports a bad topology itself
        adopt_operator_credentials(load_topology(topology).security)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    console_logs.configure(args.verbose)
    try:
        _adopt_token(args)
        if args.command in ("security", "token"):
            return security_main.run(args, default_topology_path())
        if args.command == "topology":
            topology = load_checked_topology(args.file or default_topology_path())
            print(
                f"{topology.name}: {len(topology.regions)} regions, "
                f"{len(topology.bookies)} bookies, {len(topology.zookeeper)} ZooKeeper nodes"
            )
            _print_region_loss(topology)
            return 0
        if args.command == "ledger":
            return _run_ledger(args)
        if args.command == "bench":
            return _run_bench(args)
        if args.command == "config":
            return deploy.run_config(args)
        if args.command == "init":
            return deploy.run_init(args)
        if args.command == "status":
            return deploy.run_status(args)
        if args.command == "serve":
            return serve.run(args, default_topology_path())
        if args.command == "region":
            return region_main.run(args, default_topology_path())
        if args.command in ("rebuild", "bookie"):
            return rebuild_main.run(args, default_topology_path())
        if args.command == "failover":
            return failover_main.run_failover_command(args)
        if args.command == "spark":
            from cli.spark_main import run_spark_command

            return run_spark_command(args)
        if args.command in ("stream", "write", "read", "segments"):
            from cli.stream_main import run_stream_command

            return run_stream_command(args)
        return asyncio.run(_run_cluster(args))
    except GlobelogError as err:
        return report_error(err, getattr(args, "topology", None))
    except KeyboardInterrupt:
        return 130


def report_error(err: GlobelogError, topology: str | None) -> int:
    """Prints a command's error (and what to do about it) to stderr; the exit status: 4 when
    a write's outcome is unknown (it may have been appended), 1 for any other error."""
    print(f"globelog: error [{err.code}]: {err}", file=sys.stderr)
    if isinstance(err, OutcomeUnknownError):
        print(OUTCOME_UNKNOWN_ADVICE, file=sys.stderr)
        return EXIT_OUTCOME_UNKNOWN
    if isinstance(err, MetadataUnavailableError):
        used = Path(topology or default_topology_path())
        print(reach.advice(used, default_topology_path()), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
