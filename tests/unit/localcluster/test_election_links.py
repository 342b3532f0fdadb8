"""Which established connections a cut resets: the election links between the ZooKeeper
nodes it separates that bypass the WAN emulator (localcluster/election_links.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.routes import plan_routes
from localcluster import election_links, wan
from localcluster.topology_files import load_local_topology

pytestmark = pytest.mark.unit

TOPOLOGY = load_local_topology(Path(__file__).resolve().parents[3] / "topology.yaml")
NODES = {node.region: node for node in TOPOLOGY.zookeeper}
PIDS = {101: NODES["us-east"].name, 102: NODES["us-west"].name, 103: NODES["eu-west"].name}


def listing(*sockets: tuple[int, int, int]) -> str:
    """`ss -tnpH state established` lines: (pid, local port, peer port)."""
    return "\n".join(
        f"0      0      [::ffff:127.0.0.1]:{local}  [::ffff:127.0.0.1]:{peer} "
        f'users:(("java",pid={pid},fd=54))'
        for pid, local, peer in sockets
    )


def test_a_partition_separates_the_two_regions_nodes_and_no_others() -> None:
    routes = wan.routes_between(TOPOLOGY, "us-east", "eu-west")
    assert election_links.separated_nodes(TOPOLOGY, routes) == {
        frozenset((NODES["us-east"].name, NODES["eu-west"].name))
    }
    isolated = [r for r in plan_routes(TOPOLOGY) if "us-west" in (r.from_region, r.to_region)]
    assert election_links.separated_nodes(TOPOLOGY, isolated) == {
        frozenset((NODES["us-west"].name, NODES["us-east"].name)),
        frozenset((NODES["us-west"].name, NODES["eu-west"].name)),
    }


def test_only_direct_links_between_separated_nodes_are_reset() -> None:
    east, west, eu = (NODES[r].election_port for r in ("us-east", "us-west", "eu-west"))
    pairs = {frozenset((NODES["us-east"].name, NODES["eu-west"].name))}
    listed = listing(
        (103, 41326, east),  # eu-west's node straight to us-east's election port: reset
        (102, 41316, east),  # us-west's: not separated by this cut
        (101, 44956, eu),  # us-east's straight to eu-west's: reset
        (101, 3888, 41999),  # a listener's side of a connection: its peer port is no election port
        (999, 50000, west),  # not a ZooKeeper process (toxiproxy's upstream leg, say)
    )
    found = election_links.bypassing_sockets(TOPOLOGY, pairs, listed, PIDS.get)
    assert found == [(41326, east), (44956, eu)]


async def test_ss_is_bounded_and_its_refusals_count_as_failures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every await ends (I8): a command past its time is killed and reported as failed; one
    that exits 0 but says on stderr that the kernel refused (`ss -K` when not root) fails."""
    monkeypatch.setattr(election_links, "SS_TIMEOUT_S", 0.2)
    assert await election_links._run("sleep", "30") is None
    assert await election_links._run("sh", "-c", "echo refused >&2") is None
    assert await election_links._run("sh", "-c", "echo listed") == "listed\n"
