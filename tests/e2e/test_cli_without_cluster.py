"""The `globelog` command as a newcomer meets it before any cluster runs: one short error that
says what to do, at once, with no library log lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.support.cli import run_globelog
from tests.support.topologies import write_topology

CLI_TIMEOUT_S = 120
ERROR_LINES_MAX = 6


def globelog(*args: str) -> subprocess.CompletedProcess[str]:
    return run_globelog(*args, timeout_s=CLI_TIMEOUT_S)


def test_stream_list_without_cluster_says_what_to_do(tmp_path: Path) -> None:
    topology = write_topology(tmp_path)  # free loopback ports: nothing listens on them
    done = globelog("stream", "list", "--topology", str(topology))
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert done.stdout == ""
    assert len(output.splitlines()) <= ERROR_LINES_MAX, output
    assert "Connection dropped" not in output and "kazoo" not in output
    assert "[metadata_unavailable]" in output
    assert str(topology) in output, "the topology file used is named"
    assert "globelog cluster --topology" in output and "globelog status --topology" in output
    # Every ZooKeeper address tried is named, and no session's connect timeout was waited out.
    for port in zk_ports(topology):
        assert f"127.0.0.1:{port}" in output
    assert "no session within" not in output


def test_ledger_show_without_cluster_fails_the_same_way(tmp_path: Path) -> None:
    topology = write_topology(tmp_path)
    done = globelog("ledger", "--topology", str(topology), "show", "1")
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) <= ERROR_LINES_MAX, done.stderr
    assert "Connection dropped" not in done.stderr
    assert "is the cluster of" in done.stderr and "globelog status" in done.stderr


def zk_ports(topology: Path) -> list[int]:
    document = yaml.safe_load(topology.read_text())
    return [int(node["client_port"]) for node in document["zookeeper"]]
