"""Runs BookKeeper's own Java code (its shell, its client) against a test cluster."""

from __future__ import annotations

import subprocess
from pathlib import Path

from localcluster import nodes, plan
from localcluster.controller import Cluster
from localcluster.tools import Tools

JAVA_TIMEOUT_S = 120
LEDGER_TOOL = Path(__file__).resolve().parents[1] / "interop" / "LedgerTool.java"


def java_client_conf(cluster: Cluster) -> Path:
    """The configuration BookKeeper's Java clients use on the test cluster: the metadata
    service, TLS to its bookies with globelog's client certificate."""
    conf = cluster.data_dir / "bookies" / "shell.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(plan.shell_conf(cluster.topology))
    return conf


def bookie_shell(cluster: Cluster, tools: Tools, *args: str) -> str:
    """Output (stdout and stderr: the shell logs its results) of one BookieShell command."""
    conf = java_client_conf(cluster)
    argv = [
        tools.java,
        "-Xmx256m",
        *nodes.java_zookeeper_flags(cluster.topology),
        "-cp",
        tools.bookkeeper_classpath,
        "org.apache.bookkeeper.bookie.BookieShell",
        "-conf",
        str(conf),
        *args,
    ]
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=JAVA_TIMEOUT_S, check=False
    )
    assert result.returncode == 0, (
        f"BookieShell {args} exited {result.returncode}:\n{result.stderr[-3000:]}"
    )
    return result.stdout + result.stderr


def ledger_tool_argv(cluster: Cluster, tools: Tools, *args: str) -> list[str]:
    """Command line of tests/interop/LedgerTool.java (BookKeeper's Java client)."""
    conf = java_client_conf(cluster)
    command, *rest = args
    return [
        tools.java,
        "-Xmx256m",
        *nodes.java_zookeeper_flags(cluster.topology),
        "-cp",
        tools.bookkeeper_classpath,
        str(LEDGER_TOOL),
        command,
        str(conf),
        *rest,
    ]


def ledger_tool(cluster: Cluster, tools: Tools, *args: str) -> list[str]:
    """Runs LedgerTool to completion; returns its protocol lines (KEY value...)."""
    result = subprocess.run(
        ledger_tool_argv(cluster, tools, *args),
        capture_output=True,
        text=True,
        timeout=JAVA_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, (
        f"LedgerTool {args} exited {result.returncode}:\n{result.stderr[-3000:]}"
    )
    return [line for line in result.stdout.splitlines() if line and line.split()[0].isupper()]
