"""Flags and the cluster of `globelog bench stream` (a temporary cluster unless --use-running)."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.harness import (
    add_cluster_arguments,
    bench_cluster,
    bench_progress,
    check_cluster_ports,
    run_on_bench_cluster,
)
from benchmarks.stream import RUNS, StreamWorkload, bench_stream
from core.errors import ConfigError
from localcluster.tools import find_tools

SECONDS_MAX = 600


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument("--region", default="us-east", help="where the writer runs")
    parser.add_argument("--reader-region", default="eu-west", help="where the tailing reader runs")
    parser.add_argument("--seconds", type=float, default=10.0, help="per throughput run")
    parser.add_argument("--tail-rate", type=int, default=2000, help="records/s while tailing")
    parser.add_argument(
        "--runs",
        default=",".join(sorted(RUNS)),
        help=f"comma-separated, of {','.join(sorted(RUNS))} (default: all)",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        default=Path("bench-stream.png"),
        help="PNG of latency over time (default bench-stream.png)",
    )


def run(args: argparse.Namespace) -> int:
    problems: list[str] = []
    cluster = bench_cluster(args, problems)
    if args.reader_region not in cluster.topology.region_names:
        problems.append(f"--reader-region {args.reader_region!r}: not in the topology")
    if not 1 <= args.seconds <= SECONDS_MAX:
        problems.append(f"--seconds {args.seconds}: expected 1..{SECONDS_MAX}")
    if not 1 <= args.tail_rate <= 100_000:
        problems.append(f"--tail-rate {args.tail_rate}: expected 1..100000")
    runs = frozenset(r.strip() for r in args.runs.split(",") if r.strip())
    if not runs or runs - RUNS:
        problems.append(
            f"--runs {args.runs!r}: expected a comma-separated subset of {sorted(RUNS)}"
        )
    if problems:
        raise ConfigError("bench stream: " + "; ".join(problems))
    check_cluster_ports(cluster, args.use_running)
    workload = StreamWorkload(
        args.region,
        args.reader_region,
        args.seconds,
        tail_rate=args.tail_rate,
        plot=args.plot,
        runs=runs,
    )

    progress = bench_progress("stream")
    run_on_bench_cluster(
        cluster,
        args.use_running,
        find_tools(),
        progress,
        lambda c: bench_stream(c, workload, progress),
    )
    return 0
