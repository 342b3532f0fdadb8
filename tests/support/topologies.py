"""Topology files for tests: the default shape on free loopback ports, so runs never collide."""

from __future__ import annotations

import socket
from pathlib import Path

import yaml

REGIONS = ("us-east", "us-west", "eu-west")
CI_LATENCY_MS = {("us-east", "us-west"): 4, ("us-east", "eu-west"): 4, ("us-west", "eu-west"): 7}


def free_ports(count: int) -> list[int]:
    """Ports the kernel reports free right now (bound together so they are distinct)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port_block(size: int, low: int = 30000, high: int = 60000) -> int:
    """A base port whose next `size` ports are all free now (for WAN proxy listen ports)."""
    for base in range(low, high - size, size):
        probes = []
        try:
            for port in range(base, base + size):
                sock = socket.socket()
                probes.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in probes:
                sock.close()
    raise RuntimeError("no free port block")


def topology_document(
    zk_nodes: int = 3, racks: int = 2, bookies_per_rack: int = 1, jitter_ms: int = 0
) -> dict[str, object]:
    """The default topology's shape with fresh ports."""
    bookies = len(REGIONS) * racks * bookies_per_rack
    ports = iter(free_ports(bookies + zk_nodes * 3 + len(REGIONS) * 2 + 1))
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
            "ensemble_size": 3,
            "write_quorum": 3,
            "ack_quorum": 2,
            "min_regions_for_durability": 2,
        },
        "zookeeper": zookeeper,
        "regions": regions,
        "wan": {
            "toxiproxy": {"api_port": next(ports)},
            "listen_port_base": free_port_block(len(REGIONS) * bookies),
            "default_profile": "ci",
            "profiles": {"ci": links},
        },
    }


def write_topology(directory: Path, **shape: int) -> Path:
    path = directory / "topology.yaml"
    path.write_text(yaml.safe_dump(topology_document(**shape), sort_keys=False))
    return path
