"""`globelog spark archive|retention|report`: globelog's jobs on Spark (docs/spark.md).

Local mode by default (`--master local[*]`); under spark-submit the master comes from it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from cli.reach import require_zookeeper
from cli.stream_args import duration_s
from cli.topology import default_topology_path
from core.errors import ConfigError
from core.streams import DEFAULT_NAMESPACE, check_name
from placement import load_checked_topology


def add_spark_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    spark = commands.add_parser("spark", help="archive, retention and reports on Spark")
    actions = spark.add_subparsers(dest="action", required=True)
    archive = actions.add_parser(
        "archive", help="copy a stream's completed segments to the archive as Parquet"
    )
    archive.add_argument("stream")
    archive.add_argument("--to", metavar="URI", help="archive root (default: topology archive.uri)")
    retention = actions.add_parser(
        "retention",
        help="archive completed segments, then delete the ledgers of those past the TTL",
    )
    retention.add_argument("--stream", action="append", help="default: every stream")
    retention.add_argument("--ttl", required=True, help="e.g. 7d, 12h, 30m")
    retention.add_argument("--dry-run", action="store_true")
    report = actions.add_parser(
        "report", help="per-region delivery lag and per-minute throughput of a stream"
    )
    report.add_argument("stream")
    report.add_argument("--since", default="15m", help="rewind this far (default 15m)")
    report.add_argument("--observe", default="20s", help="watch deliveries this long (0: skip)")
    report.add_argument("--plot", type=Path, help="PNG path (default: report-STREAM.png)")
    report.add_argument("--json", action="store_true")
    for sub in (archive, retention, report):
        sub.add_argument("--topology", default=os.environ.get("GLOBELOG_TOPOLOGY"))
        sub.add_argument("--namespace", default=DEFAULT_NAMESPACE)
        sub.add_argument("--region", default=os.environ.get("GLOBELOG_REGION"))
        sub.add_argument("--master", help="Spark master (default: spark-submit's, or local[*])")


def _progress(line: str) -> None:
    print(f"globelog spark: {line}", file=sys.stderr, flush=True)


def run_spark_command(args: argparse.Namespace) -> int:
    topology_path = Path(args.topology or default_topology_path()).resolve()
    topology = load_checked_topology(topology_path)
    region = args.region or topology.region_names[0]
    if region not in topology.region_names:
        raise ConfigError(f"--region {region!r}: expected one of {list(topology.region_names)}")
    check_name(args.namespace, "namespace")
    # Every flag is checked before Spark starts (seconds) or anything is changed.
    if args.action == "archive":
        check_name(args.stream)
        if args.to is None and topology.archive_uri is None:
            raise ConfigError(
                f"no archive root: give --to URI or add `archive: {{uri: ...}}` to {topology_path}"
            )
    elif args.action == "retention":
        ttl_s = _duration("--ttl", args.ttl)
        if ttl_s <= 0:
            raise ConfigError(f"--ttl {args.ttl!r}: expected a positive duration")
        for name in args.stream or []:
            check_name(name)
    else:
        check_name(args.stream)
        since_s = _duration("--since", args.since)
        observe_s = _duration("--observe", args.observe)
        if since_s <= 0 or observe_s < 0:
            raise ConfigError(
                f"--since {args.since!r} --observe {args.observe!r}: expected since > 0 and "
                "observe >= 0"
            )

    asyncio.run(require_zookeeper(topology))  # in a second, not after Spark's start and 15 s
    from pipeline import spark_session

    spark = spark_session(f"globelog-{args.action}", args.master)
    try:
        if args.action == "archive":
            return _archive(spark, args, topology_path, region)
        if args.action == "retention":
            return _retention(spark, args, topology_path, region, ttl_s)
        return _report(spark, args, topology_path, since_s, observe_s)
    finally:
        spark.stop()


def _duration(flag: str, text: str) -> float:
    try:
        return duration_s(text)
    except ConfigError as err:
        raise ConfigError(f"{flag}: {err}") from None


def _archive(spark: Any, args: argparse.Namespace, topology_path: Path, region: str) -> int:
    from pipeline.archive import ArchiveJob, archive_stream

    job = ArchiveJob(topology_path, args.stream, args.namespace, region, args.to)
    outcomes = archive_stream(spark, job, _progress)
    print(
        json.dumps(
            {
                "stream": args.stream,
                "archived": [
                    {
                        "segment": o.segment,
                        "uri": o.uri,
                        "records": o.records,
                        "seconds": round(o.seconds, 2),
                    }
                    for o in outcomes
                ],
            },
            indent=1,
        )
    )
    return 0


def _retention(
    spark: Any, args: argparse.Namespace, topology_path: Path, region: str, ttl_s: float
) -> int:
    from pipeline.archive import ArchiveJob, archive_stream
    from pipeline.retention import expire_streams

    topology = load_checked_topology(topology_path)
    streams = args.stream or asyncio.run(_all_streams(topology_path, region, args.namespace))
    if topology.archive_uri is not None and not args.dry_run:
        for stream in streams:
            archive_stream(
                spark, ArchiveJob(topology_path, stream, args.namespace, region), _progress
            )
    results = asyncio.run(
        expire_streams(topology_path, region, args.namespace, streams, ttl_s, args.dry_run)
    )
    print(json.dumps(results, indent=1, sort_keys=True))
    return 0


async def _all_streams(topology_path: Path, region: str, namespace: str) -> list[str]:
    from reader.session import read_session

    async with read_session(load_checked_topology(topology_path), region, namespace) as session:
        return await session.streams.list_streams()


def _report(
    spark: Any, args: argparse.Namespace, topology_path: Path, since_s: float, observe_s: float
) -> int:
    from figures.plots import delivery_report_plot
    from pipeline.report import ReportJob, delivery_report, report_json, report_text

    job = ReportJob(topology_path, args.stream, args.namespace, since_s, observe_s)
    report = delivery_report(spark, job, _progress)
    plot = delivery_report_plot(args.plot or Path(f"report-{args.stream}.png"), report)
    if args.json:
        print(json.dumps(report_json(report, plot), indent=1, default=str))
        return 0
    print(report_text(report, plot))
    return 0
