"""`globelog bench dl`: DlBench.java's RESULT lines read back, and the side-by-side table."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.dl import parse_results, report
from benchmarks.stream import Figures, StreamWorkload
from core.topology_loader import load_topology
from localcluster.controller import Cluster
from tests.support.topologies import write_topology

pytestmark = pytest.mark.unit


def test_result_lines_are_read_and_the_rest_ignored() -> None:
    text = (
        "12:00:01 INFO org.apache.distributedlog.BKLogSegmentWriter - something\n"
        "RESULT write-100 51234 10000000000\n"
        "RESULT not a result\n"
        "RESULT catch-up 10000 250000000\n"
    )
    assert parse_results(text) == [
        ("write-100", 51234, 10_000_000_000),
        ("catch-up", 10000, 250_000_000),
    ]


def test_the_table_sets_each_run_side_by_side_with_its_ratios(tmp_path: Path) -> None:
    path = write_topology(tmp_path)
    cluster = Cluster(load_topology(path), path, tmp_path, "ci")
    ours = Figures("globelog", 2000, 1.0, (1.0, 2.0, 3.0))
    theirs = Figures("DistributedLog", 1000, 1.0, (2.0, 4.0, 6.0))
    workload = StreamWorkload(region="us-east", reader_region="us-west", seconds=1.0)
    takeovers = [("globelog (proxy session 1.5 s)", [0.9, 1.1, 0.8]), ("DistributedLog", [2.5])]
    text = report(
        cluster, workload, [("write 100 B, batched", ours, theirs)], "journal fsync", takeovers
    )
    [row] = [line for line in text.splitlines() if line.lstrip().startswith("write 100 B")]
    cells = row.split()
    assert "2.00x" in cells, row  # records/s: 2000 against 1000
    assert cells[-1] == "0.50x", row  # p50: 2 ms against 4 ms
    assert "E/W/A" in text and "fsync" in text
    [ours_line] = [line for line in text.splitlines() if line.lstrip().startswith("globelog (")]
    assert "median 0.90 s" in ours_line and "max 1.10 s" in ours_line and "(3 rounds)" in ours_line
