"""The pure parts of `globelog bench ledger`: summaries, flags, and the parsing of
BookKeeper's BenchThroughputLatency output.

The samples in data/ are captured from a real run of BenchThroughputLatency 4.17.3 against
the local cluster (`-ensemble 3 -quorum 3 -ackQuorum 2 -throttle 64 -ledgers 2 -time 3`),
its log with the classpath lines removed, and its -latencyFile as written.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.figures import (
    describe_regions,
    ensemble_regions,
    parse_java_output,
    parse_latency_dump,
    summarise,
)
from benchmarks.harness import parse_options
from benchmarks.java_runner import JavaBenchRequest, java_bench_argv
from benchmarks.ledger import fsync_policy
from cli.main import _parser
from core.errors import ClusterError, ConfigError
from core.topology_loader import load_topology
from figures.percentiles import percentile
from ledger.codecs.entry import DigestType
from localcluster import nodes
from localcluster.controller import Cluster
from localcluster.tools import Tools

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data"
JAVA_LOG = (DATA / "bench_throughput_latency_4.17.3.log").read_text()
JAVA_DUMP = (DATA / "bench_throughput_latency_4.17.3.latency.dat").read_text()


def test_summarise_gives_throughput_and_latency_figures() -> None:
    figures = summarise([float(v) for v in range(1000, 0, -1)], elapsed_s=2.0, entry_bytes=1024)
    assert (figures.adds, figures.median_ms, figures.p95_ms) == (1000, 500, 950)
    assert (figures.p99_ms, figures.p999_ms, figures.max_ms) == (990, 999, 1000)
    assert figures.adds_per_s == 500
    assert figures.mb_per_s == pytest.approx(500 * 1024 / 1e6)


# --------------------------------------------------------------- BenchThroughputLatency output


def test_parse_java_output_of_a_real_run() -> None:
    output = parse_java_output(JAVA_LOG)
    assert (output.completions, output.duration_ms, output.ops_per_s) == (348, 3011, 115)
    assert (output.p95_ms, output.p99_ms) == (36.162082, 58.624388)
    assert output.warmup_ops_per_s == 124
    # The warm-up ledgers (E=W=A=6, logged before "Warmup phase finished") are not measured.
    assert output.ensembles == (
        ("127.0.0.1:3184", "127.0.0.1:3183", "127.0.0.1:3186"),
        ("127.0.0.1:3183", "127.0.0.1:3181", "127.0.0.1:3184"),
    )


def test_the_latency_dump_reproduces_the_printed_percentiles() -> None:
    latencies = parse_latency_dump(JAVA_DUMP)
    assert len(latencies) == 348
    ordered = sorted(latencies)
    output = parse_java_output(JAVA_LOG)
    # BenchThroughputLatency 4.17 prints sorted[floor(n * p / 100) - 1] in ms.
    for p, printed in ((95, output.p95_ms), (99, output.p99_ms)):
        assert ordered[math.floor(len(ordered) * p / 100) - 1] == pytest.approx(printed)
        ours = ordered.index(percentile(ordered, p))
        assert abs(ours - (math.floor(len(ordered) * p / 100) - 1)) <= 1


def test_parse_java_output_without_its_figures_says_what_is_missing() -> None:
    head = JAVA_LOG.split("Calculating percentiles", 1)[0]
    with pytest.raises(ClusterError, match="no 'N completions in N milliseconds' line"):
        parse_java_output(head)
    no_percentiles = "348 completions in 3011 milliseconds: 115 ops/sec\n"
    with pytest.raises(ClusterError, match="no percentiles line"):
        parse_java_output(no_percentiles)


def test_parse_latency_dump_names_a_bad_line() -> None:
    assert parse_latency_dump("2500000\t2ms\n\n1000000\t1ms\n") == [2.5, 1.0]
    with pytest.raises(ClusterError, match="latency dump line 2: 'oops'"):
        parse_latency_dump("2500000\t2ms\noops\n")


def test_ensemble_regions_are_counted_and_random_placements_summarised() -> None:
    region_of = {"a1": "us-east", "a2": "us-east", "b1": "us-west", "c1": "eu-west"}
    counts = ensemble_regions(
        [("a1", "b1", "c1"), ("a2", "b1", "c1"), ("c1", "a1", "a2")], region_of
    )
    assert counts == {("us-east", "us-west", "eu-west"): 2, ("eu-west", "us-east", "us-east"): 1}
    assert describe_regions(counts) == "us-east,us-west,eu-west x2; eu-west,us-east,us-east x1"
    assert describe_regions(counts, orders_max=1) == (
        "3 region(s) x2; 2 region(s) x1 (2 region orders)"
    )


def test_java_argv_passes_the_same_workload_and_skips_a_warm_up_too_slow_for_its_cap() -> None:
    tools = Tools("/usr/bin/java", "zk.jar", "/jars/*", "toxiproxy")
    request = JavaBenchRequest(3, 3, 2, 1024, throttle=256, ledgers=64, seconds=20)
    argv = java_bench_argv(tools, "h:1,h:2", ("-Dlogin",), request, Path("/tmp/lat.dat"))
    flags = dict(zip(argv[6::2], argv[7::2], strict=False))
    assert argv[:6] == ("/usr/bin/java", "-Xmx512m", "-Dlogin", "-cp", "/jars/*", argv[5])
    assert argv[5] == "org.apache.bookkeeper.benchmark.BenchThroughputLatency"
    assert flags["-zookeeper"] == "h:1,h:2"
    assert (flags["-ensemble"], flags["-quorum"], flags["-ackQuorum"]) == ("3", "3", "2")
    assert (flags["-throttle"], flags["-ledgers"], flags["-time"]) == ("256", "64", "20")
    assert request.rate_cap_per_s == 256 * 64
    assert "-skipwarmup" not in argv
    slow = JavaBenchRequest(3, 3, 2, 1024, throttle=100, ledgers=1, seconds=20)
    assert "-skipwarmup" in java_bench_argv(tools, "h:1", ("-Dlogin",), slow, Path("/tmp/lat.dat"))


# -------------------------------------------------------------------------------------- flags


def test_defaults_are_the_topologys_replication_and_a_temporary_cluster() -> None:
    options = parse_options(_parser().parse_args(["bench", "ledger"]))
    assert options.replication == options.cluster.topology.replication
    assert options.use_running is False
    assert options.cluster.profile == options.cluster.topology.wan.default_profile
    workload = options.workload
    assert (workload.region, workload.entry_bytes, workload.window) == ("us-east", 1024, 256)
    assert workload.digest is DigestType.CRC32  # as BenchThroughputLatency's ledgers


def test_every_bad_flag_is_reported_at_once() -> None:
    args = _parser().parse_args(
        [
            "bench",
            "ledger",
            "--region",
            "mars",
            "--replication",
            "2/3/2/1",
            "--window",
            "0",
            "--seconds",
            "100000",
            "--profile",
            "lunar",
        ]
    )
    with pytest.raises(ConfigError) as caught:
        parse_options(args)
    message = str(caught.value)
    for expected in (
        "--region 'mars': expected one of",
        "--replication 2/3/2/1: expected ack_quorum <= write_quorum <= ensemble",
        "--window 0: expected 1..10000",
        "--seconds 100000: expected 1..600",
        "--profile 'lunar': expected one of",
    ):
        assert expected in message


# ------------------------------------------------------------------------------ fsync policy


def _cluster_with_confs(tmp_path: Path, edit: dict[str, str]) -> Cluster:
    path = Path(__file__).resolve().parents[3] / "topology.yaml"
    topology = load_topology(path)
    cluster = Cluster(topology, path, tmp_path, topology.wan.default_profile)
    for bookie in topology.bookies:
        conf = nodes.bookie_conf(topology, bookie, tmp_path, local=True)
        if bookie.name in edit:
            conf = conf.replace("journalSyncData=true", edit[bookie.name])
        home = nodes.bookie_dir(tmp_path, bookie)
        home.mkdir(parents=True)
        (home / "bk.conf").write_text(conf)
    return cluster


def test_fsync_policy_is_read_from_the_bookies_config(tmp_path: Path) -> None:
    policy = fsync_policy(_cluster_with_confs(tmp_path, {}))
    assert policy.startswith("every bookie fsyncs its journal before acknowledging an add")
    assert "journalSyncData=true" in policy
    assert "journalMaxGroupWaitMSec=1" in policy
    assert "journalWriteData=default" in policy


def test_fsync_policy_flags_a_bookie_that_does_not_fsync(tmp_path: Path) -> None:
    cluster = _cluster_with_confs(tmp_path, {"bk-use-a1": "journalSyncData=false"})
    policy = fsync_policy(cluster)
    assert "does NOT fsync before every ack" in policy
    assert "journalSyncData=false/true" in policy
