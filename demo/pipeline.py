"""The Spark part of `make demo`: the demo's stream read with the `globelog` data source,
its completed segments archived to Parquet and their ledgers deleted, the stream read again
(the same records, now partly from the archive), and the throughput report."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.errors import ClusterError
from localcluster.controller import Cluster
from pipeline.report import report_text
from reader.session import read_session
from writer.admin import apply_retention

READ_REGION = "eu-west"


def _records(spark: Any, cluster: Cluster, namespace: str, stream: str) -> list[tuple[str, int]]:
    rows = (
        spark.read.format("globelog")
        .option("topology", str(cluster.topology_path))
        .option("namespace", namespace)
        .option("region", READ_REGION)
        .option("stream", stream)
        .load()
        .select("dlsn", "seq", "payload", "writer_region")
        .orderBy("seq")
        .collect()
    )
    return [(r.dlsn, hash(bytes(r.payload))) for r in rows]


async def _expire_archived(cluster: Cluster, namespace: str, stream: str) -> list[int]:
    async with read_session(cluster.topology, READ_REGION, namespace) as session:
        result = await apply_retention(
            session.streams, session.ledgers, stream, 0.001, archive_required=True
        )
    return [s.ledger_id for s in result.expired]


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Points this process's stderr (fd 2) at `path` meanwhile. Spark's JVM, started meanwhile,
    inherits it and keeps writing its console log (JVM and log4j warnings) there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def pipeline_demo(cluster: Cluster, namespace: str, stream: str, archive_root: Path) -> None:
    from pipeline import spark_session
    from pipeline.archive import ArchiveJob, archive_stream
    from pipeline.report import ReportJob, delivery_report

    began = time.monotonic()
    spark_log = cluster.data_dir / "logs" / "spark.log"
    with _stderr_to(spark_log):  # the story is no place for the JVM's warnings
        spark = spark_session("globelog-demo", "local[2]")
    try:
        print(
            f"  Spark local[2] session ready in {time.monotonic() - began:.1f} s "
            f"(its log: {spark_log.relative_to(cluster.data_dir.parent)})"
        )
        before = _records(spark, cluster, namespace, stream)
        print(
            f"  read {stream!r} from {READ_REGION}'s bookies with the data source: {len(before)} records"
        )
        job = ArchiveJob(cluster.topology_path, stream, namespace, READ_REGION, str(archive_root))
        archived = archive_stream(spark, job)
        print(
            f"  archived {len(archived)} completed segment(s) to Parquet under {archive_root.name}/: "
            f"{sum(a.records for a in archived)} records"
        )
        deleted = asyncio.run(_expire_archived(cluster, namespace, stream))
        print(f"  retention deleted the ledgers of the archived segments: {deleted}")
        after = _records(spark, cluster, namespace, stream)
        same = "the same records" if after == before else "DIFFERENT records"
        print(f"  read again: {len(after)} records, {same} (archived ranges read from Parquet)")
        if after != before:
            raise ClusterError("demo: a read across archived segments differs: please report it")
        report = delivery_report(
            spark, ReportJob(cluster.topology_path, stream, namespace, since_s=900, observe_s=0)
        )
        # No plot: nothing writes while Spark runs, and the story's picture shows the lags.
        print("  " + report_text(report).replace("\n", "\n  "))
    finally:
        spark.stop()
