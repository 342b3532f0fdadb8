"""Every globelog command that docs/deploy.md and deploy/ tell an operator to run parses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from cli.main import _parser
from core.topology_loader import load_topology, local_problems

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def commands_in_docs() -> list[str]:
    text = (REPO / "docs" / "deploy.md").read_text()
    found = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            code = line.split("  #")[0]
            found += [p.strip() for p in code.split("|") if p.strip().startswith("globelog ")]
    return found


def commands_in_units() -> list[str]:
    found = []
    for unit in sorted((REPO / "deploy" / "systemd").glob("*.service")):
        for line in unit.read_text().splitlines():
            if line.startswith(("ExecStart=", "ExecStartPre=")) and "bin/globelog " in line:
                command = line.split("=", 1)[1].split("bin/", 1)[1]
                found.append(command.replace("%i", "us-east" if "proxy" in unit.name or "rebuilder" in unit.name else
                                             _node_for(unit.name)))  # fmt: skip
    return found


def _node_for(unit: str) -> str:
    return "zk-us-east" if "zookeeper" in unit else "bk-us-east-a"


def test_the_docs_and_units_name_commands() -> None:
    assert len(commands_in_docs()) >= 8
    assert len(commands_in_units()) == 6


@pytest.mark.parametrize("command", commands_in_docs() + commands_in_units())
def test_each_documented_command_parses(command: str) -> None:
    argv = shlex.split(command)[1:]
    try:
        _parser().parse_args(argv)
    except SystemExit as exit_:
        pytest.fail(f"`{command}` does not parse (exit {exit_.code})")


def test_the_example_topology_is_a_deployment_not_a_local_cluster() -> None:
    topology = load_topology(REPO / "deploy" / "topology.example.yaml")
    assert topology.wan is None
    assert all(host.endswith(".example.com") for _, host in topology.hosts())
    assert local_problems(topology)  # the local launcher would refuse it
    names = {b.name for b in topology.bookies} | {n.name for n in topology.zookeeper}
    for unit_command in commands_in_units():
        if " config " in unit_command:
            assert shlex.split(unit_command)[3] in names
    doc = yaml.safe_load((REPO / "deploy" / "topology.example.yaml").read_text())
    assert doc["replication"]["min_regions_for_durability"] == 2
