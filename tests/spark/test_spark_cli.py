"""`globelog spark ...` as an operator runs it: retention with an archive configured copies the
segments first and deletes only their ledgers, after which a read proxy still serves every
record; bad flags are refused before Spark starts."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import yaml

from localcluster.controller import Cluster
from region.client import ReadClient
from tests.integration.streams.test_stream_cli import run_bounded
from tests.spark.test_archive import ledger_exists
from tests.spark.test_batch_read import write_stream
from tests.support.proxies import read_proxy
from tests.support.streams import fresh_namespace
from tests.support.topologies import write_topology

SPARK_COMMAND_S = 180.0


def spark_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    # a Spark job's JVM starts in 10-20 s alone; on two cores shared with the rest of the
    # suite one retention run took over 60 s (a fresh clone's run)
    return run_bounded([sys.executable, "-m", "cli.main", "spark", *args], b"", SPARK_COMMAND_S)


def with_archive(cluster: Cluster, tmp_path: Path) -> Path:
    """The cluster's topology with an archive beside it (relative: resolved next to the file)."""
    document = yaml.safe_load(cluster.topology_path.read_text())
    document["archive"] = {"uri": "cold"}
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


async def read_through_proxy(cluster: Cluster, namespace: str, stream: str) -> list[bytes]:
    async with (
        read_proxy(cluster, "eu-west") as proxy,
        ReadClient([proxy.me.url], namespace) as reader,
    ):
        return [r.payload async for r in reader.read(stream, from_seq=0, follow=False)]


def test_spark_retention_archives_first_and_readers_still_get_every_record(
    cluster: Cluster, tmp_path: Path
) -> None:
    namespace = fresh_namespace()
    records = asyncio.run(write_stream(cluster, namespace, "events", 1200))
    topology = with_archive(cluster, tmp_path)
    common = ["--topology", str(topology), "--namespace", namespace, "--master", "local[1]"]

    done = spark_cli("retention", "--stream", "events", "--ttl", "1ms", *common)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    [result] = json.loads(done.stdout)
    segments = sorted({r.dlsn.segment for r in records})
    assert result["archive_required"] is True
    assert result["expired_segments"] == segments
    assert len(result["ledgers_deleted"]) == len(segments)
    for ledger_id in result["ledgers_deleted"]:
        assert not asyncio.run(ledger_exists(cluster, namespace, ledger_id))
    assert sorted(p.name for p in (tmp_path / "cold" / namespace / "events").iterdir()) == [
        f"segment-{s:018d}" for s in segments
    ]
    served = asyncio.run(read_through_proxy(cluster, namespace, "events"))
    assert served == [r.payload for r in records]


def test_bad_spark_flags_are_refused_before_spark_starts(tmp_path: Path) -> None:
    """Refused from the command line and the topology file alone: no cluster is needed (and
    none is reached)."""
    topology = ["--topology", str(write_topology(tmp_path))]
    cases = [
        (["report", "s", "--since=-5m", *topology], "--since: duration '-5m'"),
        (["report", "s", "--observe", "soon", *topology], "--observe: duration 'soon'"),
        (["archive", "s", *topology], "give --to URI or add `archive: {uri: ...}`"),
        (["retention", "--ttl", "0s", *topology], "--ttl '0s': expected a positive duration"),
        (["archive", "bad/name", "--to", "/tmp/x", *topology], "bad/name"),
        (["archive", "s", "--to", "/tmp/x", "--region", "mars", *topology], "--region 'mars'"),
    ]
    for argv, expected in cases:
        refused = spark_cli(*argv)
        assert refused.returncode == 1, (argv, refused.stdout)
        assert expected in refused.stderr.decode(), (argv, refused.stderr.decode())
        assert b"SparkContext" not in refused.stderr and b"log4j" not in refused.stderr
