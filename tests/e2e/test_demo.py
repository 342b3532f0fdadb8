"""`make demo` as a user runs it (`python -m demo`, the entry `make demo` runs), on a topology
of free ports and a data dir of the test's own, so it never meets a developer's running demo:
its whole story, the Spark step included, judged by what it prints."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_cluster_cli import globelog, processes_mentioning
from tests.support.topologies import REGIONS, free_ports, write_topology

# The demo takes 2-4 minutes on two busy cores: cluster up, the ledger part, a minute of
# faults, the catch-up (bounded at 90 s by the demo itself), Spark and cluster down.
DEMO_TIMEOUT_S = 900
FAILOVER_S_MAX = 30.0


def run_demo(topology: Path, data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "demo", "--topology", str(topology), "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )


def region_rows(output: str) -> dict[str, tuple[int, int, int]]:
    """The summary table: region -> (read, lost, duplicated)."""
    rows = re.findall(r"^  (\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\d+\s+\d+$", output, re.MULTILINE)
    return {region: (int(read), int(lost), int(dup)) for region, read, lost, dup in rows}


def server_logs(data: Path) -> str:
    """The tails of the servers' logs a demo cut short keeps, for the failure's message."""
    logs = sorted((data / "logs").glob("*")) if (data / "logs").is_dir() else []
    return "".join(f"\n--- {log.name}\n{log.read_text(errors='replace')[-1500:]}" for log in logs)


# the demo's own bound, not the suite's default per test (300 s): on two cores shared with the
# Spark and browser tests the story has taken over five minutes
@pytest.mark.timeout(DEMO_TIMEOUT_S + 60)
def test_the_demo_tells_its_whole_story(tmp_path: Path) -> None:
    topology = with_console(write_topology(tmp_path))
    data = tmp_path / "cluster-demo"
    try:
        done = run_demo(topology, data)
    finally:
        if data.exists():  # the demo did not take its cluster down (a timeout, a crash)
            globelog("cluster", "--topology", str(topology), "--data-dir", str(data), "down")
    out = done.stdout
    shown = f"stdout:\n{out[-6000:]}\nstderr:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, shown + server_logs(data)

    counted = re.search(r"^  (\d+) records acknowledged", out, re.MULTILINE)
    assert counted is not None, shown
    acknowledged = int(counted[1])
    assert acknowledged > 100, shown
    rows = region_rows(out)
    assert sorted(rows) == sorted(REGIONS), shown
    for region, (read, lost, duplicated) in rows.items():
        assert (read, lost, duplicated) == (acknowledged, 0, 0), f"{region}\n{shown}"

    failover = re.search(
        r"writes resumed on (\S+); no write was acknowledged for ([\d.]+) s around the kill", out
    )
    assert failover is not None, shown
    assert 0 < float(failover[2]) < FAILOVER_S_MAX
    assert "durability audit passed" in out, shown
    console = re.search(r"web console \(us-east\): (https://\S+)", out)
    assert console is not None, shown  # the local cluster started it, the demo says where

    picture = re.search(r"the story in a picture: (\S+)", out)
    assert picture is not None, shown
    assert Path(picture[1]) == tmp_path / "demo-report-orders.png"
    assert Path(picture[1]).read_bytes().startswith(b"\x89PNG")

    # The Spark step: read, archived, ledgers deleted, read again the same, the report.
    read = re.search(r"read 'orders' from \S+'s bookies with the data source: (\d+) records", out)
    assert read is not None and int(read[1]) >= acknowledged, shown
    assert re.search(r"archived [1-9]\d* completed segment", out), shown
    assert f"read again: {read[1]} records, the same records" in out, shown
    assert "== delivery report: stream 'orders'" in out, shown

    assert re.search(r"stopped \d+ processes; removed cluster-demo/", out), shown
    assert not data.exists()
    assert processes_mentioning(str(tmp_path)) == []
    # The libraries' logs stay out of the story.
    assert "Connection dropped" not in out + done.stderr
    assert "kazoo" not in out + done.stderr


def with_console(topology: Path) -> Path:
    """The topology with a web console in us-east, as the shipped topology.yaml has."""
    document = yaml.safe_load(topology.read_text())
    base = document["wan"]["listen_port_base"]
    (port,) = free_ports(1)
    while base <= port < base + 1000:  # never a port the WAN routes take
        (port,) = free_ports(1)
    document["regions"][0]["consoles"] = [{"name": "console-us-east", "port": port}]
    topology.write_text(yaml.safe_dump(document, sort_keys=False))
    return topology


def test_the_demo_refuses_ports_another_cluster_holds(tmp_path: Path) -> None:
    topology = write_topology(tmp_path)
    zk_port = yaml.safe_load(topology.read_text())["zookeeper"][0]["client_port"]
    with socket.create_server(("127.0.0.1", zk_port)):  # another cluster's ZooKeeper, say
        done = run_demo(topology, tmp_path / "cluster-demo")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"127.0.0.1:{zk_port}" in done.stderr and "are in use" in done.stderr
    assert "globelog cluster down" in done.stderr
    assert processes_mentioning(str(tmp_path)) == []
