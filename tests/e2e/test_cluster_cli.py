"""`globelog cluster up | status --json | down` as a user runs them, on the default shape."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import yaml

from tests.support.cli import run_globelog
from tests.support.topologies import write_topology

CLI_TIMEOUT_S = 240


def globelog(*args: str) -> subprocess.CompletedProcess[str]:
    return run_globelog(*args, timeout_s=CLI_TIMEOUT_S)


def processes_mentioning(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and int(entry.name) != os.getpid() and state != "Z":
            found.append(int(entry.name))
    return found


def test_up_status_down_leaves_nothing_behind(tmp_path: Path) -> None:
    topology = write_topology(tmp_path)
    data = tmp_path / "data"
    common = ["--topology", str(topology), "--data-dir", str(data)]
    try:
        up = globelog("cluster", *common, "up")
        assert up.returncode == 0, up.stderr
        assert "cluster up in" in up.stdout and "started 22" in up.stdout

        again = globelog("cluster", *common, "up")
        assert again.returncode == 0, again.stderr
        assert "started 0, already running 22" in again.stdout

        status = globelog("cluster", *common, "status", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        report = json.loads(status.stdout)
        assert report["healthy"]
        zk = [p for p in report["processes"].values() if p["kind"] == "zookeeper"]
        assert len(zk) == 3 and all(p["healthy"] for p in zk)
        relays = [p for p in report["processes"].values() if p["kind"] == "zk-relay"]
        assert len(relays) == 3 and all(p["healthy"] for p in relays)
        assert sum(p["kind"] == "bookie" for p in report["processes"].values()) == 6
        proxies = [p for p in report["processes"].values() if p["kind"].endswith("-proxy")]
        assert sorted(p["kind"] for p in proxies) == ["read-proxy"] * 3 + ["write-proxy"] * 3
        assert all(p["healthy"] for p in proxies)
        rebuilders = [p for p in report["processes"].values() if p["kind"] == "rebuilder"]
        assert len(rebuilders) == 3 and all(p["healthy"] for p in rebuilders)
        assert {p["region"] for p in rebuilders} == {"us-east", "us-west", "eu-west"}
        routes = sorted(r["kind"] for r in report["wan"].values())
        zk_routes = ["zk-client"] * 6 + ["zk-election"] * 6 + ["zk-peer"] * 6
        assert routes == ["bookie"] * 12 + zk_routes
        # every process has a log; every one but the rebuilders (no port) its ports
        assert all(p["log"] for p in report["processes"].values())
        assert all(p["ports"] for p in report["processes"].values() if p["kind"] != "rebuilder")
        assert processes_mentioning(str(tmp_path)), "the cluster's processes should be running"
    finally:
        down = globelog("cluster", *common, "down")
    assert down.returncode == 0, down.stderr
    assert "stopped 22 process(es)" in down.stdout
    assert processes_mentioning(str(tmp_path)) == []
    after = globelog("cluster", *common, "status", "--json")
    assert after.returncode == 3 and not json.loads(after.stdout)["healthy"]


def test_bad_arguments_get_clear_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("regions: 7\n")
    result = globelog("cluster", "--topology", str(bad), "--data-dir", str(tmp_path), "status")
    assert result.returncode == 1
    assert "regions: expected a list, got 7" in result.stderr
    assert "replication: expected a mapping" in result.stderr


def test_up_refuses_ports_taken_by_another_process(tmp_path: Path) -> None:
    topology = write_topology(tmp_path)
    port = yaml.safe_load(topology.read_text())["zookeeper"][0]["client_port"]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = globelog(
            "cluster", "--topology", str(topology), "--data-dir", str(tmp_path / "d"), "up"
        )
    assert result.returncode == 1
    assert f"port(s) [{port}] already in use by another process" in result.stderr
    assert processes_mentioning(str(tmp_path / "d")) == []
