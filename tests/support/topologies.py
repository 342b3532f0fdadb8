"""Topology files for tests: the default shape on free loopback ports, so runs never collide."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

import yaml

from tests.support.security import SECURITY

REGIONS = ("us-east", "us-west", "eu-west")
CI_LATENCY_MS = {("us-east", "us-west"): 4, ("us-east", "eu-west"): 4, ("us-west", "eu-west"): 7}


# Below the kernel's ephemeral range (32768+), so outgoing connections never take these
# ports between the check and the server's bind; random, so concurrent runs rarely meet.
# Under pytest-xdist each worker draws from its own slice: two workers each writing a
# cluster's topology before either binds its ports would otherwise pick the same one.


def _port_range(low: int = 20000, high: int = 32000) -> tuple[int, int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2:
        return low, high
    width = (high - low) // count
    first = low + int(worker[2:]) * width
    return first, first + width


PORT_LOW, PORT_HIGH = _port_range()


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """Distinct ports that are free right now."""
    chosen: list[int] = []
    while len(chosen) < count:
        port = random.randrange(PORT_LOW, PORT_HIGH)
        if port not in chosen and _bindable(port):
            chosen.append(port)
    return chosen


def free_port_block(size: int, avoid: list[int]) -> int:
    """A base port whose next `size` ports are all free now (for WAN proxy listen ports)."""
    for _ in range(1000):
        base = random.randrange(PORT_LOW, PORT_HIGH - size)
        block = range(base, base + size)
        if not set(block) & set(avoid) and all(_bindable(p) for p in block):
            return base
    raise RuntimeError(f"no block of {size} free ports in {PORT_LOW}..{PORT_HIGH}")


def topology_document(
    zk_nodes: int = 3, racks: int = 2, bookies_per_rack: int = 1, jitter_ms: int = 0
) -> dict[str, object]:
    """The default topology's shape with fresh ports."""
    bookies = len(REGIONS) * racks * bookies_per_rack
    port_list = free_ports(bookies + zk_nodes * 3 + len(REGIONS) * 2 + 1)
    ports = iter(port_list)
    regions = []
    for region in REGIONS:
        short = "".join(part[0] for part in region.split("-"))
        regions.append(
            {
                "name": region,
                "racks": [
                    {
                        "name": f"rack-{r}",
                        "bookies": [
                            {"name": f"bk-{short}-{r}{i}", "port": next(ports)}
                            for i in range(bookies_per_rack)
                        ],
                    }
                    for r in "ab"[:racks]
                ],
                "write_proxies": [{"name": f"wp-{region}", "port": next(ports)}],
                "read_proxies": [{"name": f"rp-{region}", "port": next(ports)}],
            }
        )
    zookeeper = [
        {
            "name": f"zk-{REGIONS[i]}",
            "region": REGIONS[i],
            "client_port": next(ports),
            "peer_port": next(ports),
            "election_port": next(ports),
        }
        for i in range(zk_nodes)
    ]
    links = [
        {"between": list(pair), "one_way_ms": ms, "jitter_ms": jitter_ms}
        for pair, ms in CI_LATENCY_MS.items()
    ]
    return {
        "name": "test-3-regions",
        "replication": {
            # the shipped default: 2/1/1 copies, writes go on with any one region down
            "ensemble_size": 4,
            "write_quorum": 4,
            "ack_quorum": 3,
            "min_regions_for_durability": 2,
        },
        "zookeeper": zookeeper,
        "regions": regions,
        # a wiped bookie's copies re-made within a test's time; longer than any test keeps a
        # bookie away (its 15 s session included) without wanting its copies re-made
        "rebuild": {"lost_bookie_delay_s": 5},
        # tokens demanded, as by default; one key and admin token for the test process
        "security": {"dir": str(SECURITY.directory)},
        "wan": {
            "toxiproxy": {"api_port": next(ports)},
            # every WAN route (to bookies; to ZooKeeper's client, peer and election ports),
            # then a peer relay per ZooKeeper node (core/routes.py)
            "listen_port_base": free_port_block(
                len(REGIONS) * (bookies + 3 * zk_nodes) + zk_nodes, port_list
            ),
            "default_profile": "ci",
            "profiles": {
                "ci": links,
                # the same shape at real distances (tests that need a slow WAN switch to it)
                "realistic": [
                    {**link, "one_way_ms": 10 * link["one_way_ms"], "jitter_ms": 4}
                    for link in links
                ],
            },
        },
    }


def write_topology(directory: Path, **shape: int) -> Path:
    path = directory / "topology.yaml"
    path.write_text(yaml.safe_dump(topology_document(**shape), sort_keys=False))
    return path
