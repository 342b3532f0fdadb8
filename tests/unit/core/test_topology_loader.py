"""topology.yaml validation: valid files load; each malformed file reports all its problems."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.errors import TopologyError
from core.routes import peer_relays, plan_routes, route_to, zk_hosts_for
from core.topology_loader import (
    load_topology,
    local_problems,
    parse_topology,
    region_loss_summary,
    region_loss_warning,
    require_local,
)
from tests.support.topologies import topology_document

REPO = Path(__file__).resolve().parents[3]


def base() -> dict[str, Any]:
    return copy.deepcopy(BASE)


BASE = topology_document()


def problems_of(document: Any) -> list[str]:
    with pytest.raises(TopologyError) as caught:
        parse_topology(yaml.safe_dump(document), "t.yaml")
    return list(caught.value.problems)


def test_the_repository_topology_is_the_documented_default() -> None:
    topology = load_topology(REPO / "topology.yaml")
    assert len(topology.regions) == 3
    assert len(topology.zookeeper) == 3
    for region in topology.regions:
        assert len(region.racks) == 2
        assert len(region.bookies) >= 2
        assert len(region.write_proxies) == 1 and len(region.read_proxies) == 1
    realistic = {
        frozenset((x.region_a, x.region_b)): x.one_way_ms
        for x in topology.wan.profiles["realistic"]
    }
    assert sorted(realistic.values()) == [40, 43, 68]
    assert set(topology.wan.profiles) == {"realistic", "ci"}
    assert topology.bookie("bk-use-a1").location == "/us-east/rack-a"


def test_generated_topology_loads_and_is_frozen() -> None:
    topology = parse_topology(yaml.safe_dump(base()))
    assert topology.replication.ack_quorum == 3
    with pytest.raises(AttributeError):
        topology.name = "x"  # type: ignore[misc]


def test_every_problem_is_reported_at_once_with_its_path() -> None:
    doc = base()
    doc["regions"][1]["racks"][0]["bookies"][0]["port"] = 70000
    doc["regions"][0]["write_proxies"][0]["host"] = "10.0.0"
    doc["zookeeper"][2]["region"] = "mars"
    doc["wan"]["profiles"]["ci"][0]["one_way_ms"] = -3
    doc["replication"]["ensemble_size"] = "three"
    problems = problems_of(doc)
    assert (
        "regions[1].racks[0].bookies[0].port: expected an integer 1..65535, got 70000" in problems
    )
    assert any(
        p.startswith("regions[0].write_proxies[0].host: expected a DNS name or an IPv4 address")
        for p in problems
    )
    assert any(p.startswith("zookeeper[2].region: unknown region 'mars'") for p in problems)
    assert any(
        p.startswith("wan.profiles.ci[0].one_way_ms: expected whole milliseconds") for p in problems
    )
    assert any(
        p.startswith("replication.ensemble_size: expected an integer >= 1, got 'three'")
        for p in problems
    )
    assert len(problems) == 5, problems


MALFORMED: list[tuple[str, Any, list[str]]] = [
    ("not a mapping", ["a", "b"], ["expected a mapping, got ['a', 'b']"]),
    ("empty file", None, ["expected a mapping, got None"]),
]


@pytest.mark.parametrize(
    ("label", "document", "expected"), MALFORMED, ids=[m[0] for m in MALFORMED]
)
def test_documents_that_are_not_topologies(label: str, document: Any, expected: list[str]) -> None:
    assert problems_of(document) == expected


def mutate(path: str, value: Any) -> dict[str, Any]:
    doc = base()
    node: Any = doc
    keys = path.replace("[", ".").replace("]", "").split(".")
    for key in keys[:-1]:
        node = node[int(key)] if key.isdigit() else node[key]
    last = keys[-1]
    if value is DELETE:
        del node[int(last) if last.isdigit() else last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return doc


class _Delete:
    def __repr__(self) -> str:  # a stable test id, the same in every worker process
        return "DELETE"


DELETE = _Delete()
CASES: list[tuple[str, Any, str]] = [
    (
        "replication.ack_quorum",
        1,
        "replication: ack_quorum=1 could be met inside fewer than 2 regions",
    ),
    (
        "replication.ack_quorum",
        5,
        "replication: need 1 <= ack_quorum <= write_quorum <= ensemble_size",
    ),
    (
        "replication.ensemble_size",
        9,
        "replication.ensemble_size: is 9 but the topology has only 6 bookies",
    ),
    (
        "replication.min_regions_for_durability",
        4,
        "replication: min_regions_for_durability=4 but the topology has only 3 region(s)",
    ),
    ("replication.typo_key", 1, "replication.typo_key: unknown key"),
    ("replication.write_quorum", DELETE, "replication.write_quorum: missing; expected an integer"),
    ("regions", [], "regions: expected at least 1 item(s), got 0"),
    ("regions[1].name", "us-east", "regions[1].name: duplicate region name 'us-east'"),
    ("regions[0].name", "US East!", "regions[0].name: expected a name of 1-64 characters"),
    (
        "regions[0].racks[1].name",
        "rack-a",
        "regions[0].racks[1].name: duplicate rack name 'rack-a'",
    ),
    ("regions[0].racks[0].bookies", [], "regions[0].racks[0].bookies: expected at least 1 item(s)"),
    (
        "regions[0].racks[0].bookies[0].port",
        "3181",
        "regions[0].racks[0].bookies[0].port: expected an integer 1..65535, got '3181'",
    ),
    ("regions[0].racks", "rack-a", "regions[0].racks: expected a list, got 'rack-a'"),
    ("regions[2].write_proxies", DELETE, "regions[2].write_proxies: expected a list, got None"),
    ("zookeeper[1].id", 1, "zookeeper[1].id: duplicate server id 1"),
    ("zookeeper[0].id", 0, "zookeeper[0].id: expected an integer 1..255, got 0"),
    (
        "zookeeper[0].client_port",
        0,
        "zookeeper[0].client_port: expected an integer 1..65535, got 0",
    ),
    ("wan.default_profile", "fast", "wan.default_profile: 'fast' is not a profile"),
    (
        "wan.profiles.ci[0].between",
        ["us-east", "us-east"],
        "wan.profiles.ci[0].between: expected two different regions",
    ),
    ("wan.profiles.ci[2]", DELETE, "wan.profiles.ci: no link between 'us-west' and 'eu-west'"),
    (
        "wan.profiles.ci[0].jitter_ms",
        50,
        "wan.profiles.ci[0].jitter_ms: is 50.0 ms, more than one_way_ms",
    ),
    (
        "wan.profiles.ci[0].one_way_ms",
        4.5,
        "wan.profiles.ci[0].one_way_ms: expected whole milliseconds",
    ),
    ("wan.toxiproxy", DELETE, "wan.toxiproxy: expected a mapping, got None"),
    ("archive", "/cold", "archive: expected a mapping, got '/cold'"),
    ("archive", {"uri": ""}, "archive.uri: expected a directory or a Hadoop filesystem URI"),
    ("archive", {"url": "/cold"}, "archive.url: unknown key; expected one of ['uri']"),
]


@pytest.mark.parametrize(
    ("path", "value", "expected"), CASES, ids=[f"{c[0]}={c[1]!r}"[:60] for c in CASES]
)
def test_malformed_field_names_its_path(path: str, value: Any, expected: str) -> None:
    problems = problems_of(mutate(path, value))
    assert any(p.startswith(expected) for p in problems), problems


def test_duplicate_addresses_are_reported_for_each_clash() -> None:
    doc = base()
    zk_port = doc["zookeeper"][0]["client_port"]
    doc["regions"][0]["racks"][0]["bookies"][0]["port"] = zk_port
    doc["regions"][1]["read_proxies"][0]["name"] = doc["regions"][0]["read_proxies"][0]["name"]
    problems = problems_of(doc)
    assert any(f"address 127.0.0.1:{zk_port} is already used by regions[0]" in p for p in problems)
    assert any(
        p.startswith("regions[1].read_proxies[0]: name rp-us-east is already used")
        for p in problems
    )


def test_quorum_rejection_says_the_smallest_valid_ack_quorum_and_why() -> None:
    doc = base()
    doc["replication"].update(ensemble_size=6, write_quorum=6, ack_quorum=2)
    doc["regions"][0]["racks"][0]["bookies"].append({"name": "extra", "port": 1})
    problems = problems_of(doc)
    message = next(p for p in problems if p.startswith("replication: ack_quorum=2"))
    assert "most even spread of write_quorum=6 copies over 3 regions is [2, 2, 2]" in message
    assert "the smallest valid ack_quorum is 3" in message


def test_region_loss_summary_and_warning() -> None:
    doc = base()
    doc["replication"].update(ensemble_size=4, write_quorum=4, ack_quorum=3)
    surviving = parse_topology(yaml.safe_dump(doc))
    assert "up to 1 of 3 regions down" in region_loss_summary(surviving)
    assert region_loss_warning(surviving) is None
    doc["replication"].update(ensemble_size=3, write_quorum=3, ack_quorum=2)
    fragile = parse_topology(yaml.safe_dump(doc))  # E/W/A 3/3/2 over 2 bookies a region
    assert "up to 0 of 3 regions down" in region_loss_summary(fragile)
    warning = region_loss_warning(fragile)
    assert warning is not None and "cannot write through the loss of one region" in warning
    assert warning.endswith("E/W/A 4/4/3 with min_regions_for_durability=2 can")


def test_the_shipped_topology_writes_through_the_loss_of_any_one_region() -> None:
    shipped = load_topology(Path(__file__).resolve().parents[3] / "topology.yaml")
    assert region_loss_warning(shipped) is None, region_loss_warning(shipped)


def test_an_archive_directory_is_found_beside_its_topology_and_a_uri_is_kept(
    tmp_path: Path,
) -> None:
    for uri, expected in (("cold", str(tmp_path / "cold")), ("s3a://bucket/gl", "s3a://bucket/gl")):
        doc = base() | {"archive": {"uri": uri}}
        (tmp_path / "t.yaml").write_text(yaml.safe_dump(doc))
        assert load_topology(tmp_path / "t.yaml").archive_uri == expected
    assert load_topology(REPO / "topology.yaml").archive_uri is None, "archiving is opt-in"


def test_invalid_yaml_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="not valid YAML"):
        parse_topology("regions: [unclosed", "bad.yaml")
    with pytest.raises(TopologyError, match="cannot read the file"):
        load_topology(tmp_path / "missing.yaml")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TopologyError, match="not UTF-8"):
        load_topology(binary)


def test_the_cli_also_rejects_settings_that_cannot_be_striped(tmp_path: Path) -> None:
    from placement import load_checked_topology

    doc = base()
    doc["replication"].update(ensemble_size=5, write_quorum=3, ack_quorum=2)
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    load_topology(path)  # each write set alone could keep the rule ...
    with pytest.raises(TopologyError) as caught:
        load_checked_topology(path)  # ... but no striping of 5 positions over 3 regions does
    [problem] = caught.value.problems
    assert problem.startswith("replication: round-robin striping of ensemble_size=5")
    assert "ensemble_size=3 keeps ack_quorum=2 valid" in problem


def deployed() -> dict[str, Any]:
    """The base topology moved onto named hosts and IPs, without the local WAN emulation."""
    doc = base()
    del doc["wan"]
    for node in doc["zookeeper"]:
        node["host"] = f"{node['name']}.{node['region']}.example.com"
    for region in doc["regions"]:
        for rack in region["racks"]:
            for i, bookie in enumerate(rack["bookies"]):
                bookie["host"] = f"10.{len(region['name'])}.{len(rack['name'])}.{i + 1}"
        for kind in ("write_proxies", "read_proxies"):
            for proxy in region[kind]:
                proxy["host"] = f"{proxy['name']}.{region['name']}.Example.COM"
    return doc


def test_a_deployment_of_named_hosts_without_a_wan_section_validates() -> None:
    topology = parse_topology(yaml.safe_dump(deployed()), "prod.yaml")
    assert topology.wan is None
    hosts = dict(topology.hosts())
    assert all(not h.startswith("127.") for h in hosts.values())
    # DNS is case-insensitive: names are kept lower-cased, so ids compare as written
    proxy = topology.regions[0].write_proxies[0]
    assert proxy.endpoint.host == proxy.endpoint.host.lower()
    port = topology.zookeeper[0].client.port
    assert topology.zk_connect_for("us-east") == f"zk-us-east.us-east.example.com:{port}"
    # a process falls back to the other regions' nodes, dialled directly, its own first
    assert zk_hosts_for(topology, "us-west").split(",") == [
        f"{node.client.host}:{node.client.port}"
        for node in sorted(topology.zookeeper, key=lambda n: n.region != "us-west")
    ]


def test_zookeeper_clients_fall_back_to_other_regions_through_the_wan() -> None:
    """In the local cluster a region's processes reach another region's ZooKeeper node
    through that link's WAN route (so a partition cuts it), their own region's node first."""
    topology = load_topology(REPO / "topology.yaml")
    routes = plan_routes(topology)
    for region in topology.region_names:
        hosts = zk_hosts_for(topology, region).split(",")
        own = [n for n in topology.zookeeper if n.region == region]
        assert hosts[: len(own)] == [n.client.address for n in own]
        remote = [n for n in topology.zookeeper if n.region != region]
        expected = [route_to(routes, region, "zk-client", n.name) for n in remote]
        assert hosts[len(own) :] == [r.listen.address for r in expected if r is not None]
        assert len(hosts) == len(topology.zookeeper)
    # every listen port is distinct, the peer relays' included
    ports = [r.listen.port for r in routes] + [r.listen.port for r in peer_relays(topology)]
    assert len(ports) == len(set(ports))


def test_the_local_launcher_refuses_real_hosts_and_says_why() -> None:
    topology = parse_topology(yaml.safe_dump(deployed()), "prod.yaml")
    problems = local_problems(topology)
    zk = topology.zookeeper[0]
    assert (
        f"zookeeper node {zk.name}: host '{zk.client.host}' is not a loopback address; the "
        "local cluster runs every process on this machine and keeps its traffic on loopback, "
        "so it takes 127.x.y.z or localhost only"
    ) in problems
    assert any(p.startswith("wan: missing; the local cluster emulates the WAN") for p in problems)
    assert problems[-1].endswith("(docs/deploy.md)")
    # one problem per non-loopback address, then the wan section, then the way forward
    assert len(problems) == len(topology.hosts()) + 2
    with pytest.raises(TopologyError, match=r"prod\.yaml: \d+ problem"):
        require_local(topology, "prod.yaml")
    require_local(parse_topology(yaml.safe_dump(base())), "t.yaml")  # loopback: accepted


@pytest.mark.parametrize(
    ("host", "accepted"),
    [
        ("bk1.us-east.example.com", "bk1.us-east.example.com"),
        ("BK1.Example.com", "bk1.example.com"),
        ("localhost", "127.0.0.1"),
        ("10.1.2.3", "10.1.2.3"),
        ("198.18.0.7", "198.18.0.7"),
        ("bookie-1", "bookie-1"),
        ("0.0.0.0", None),  # a wildcard, not an address anyone can dial
        ("10.1.2", None),
        ("256.1.1.1", None),
        ("1.2.3.4.5", None),
        ("-bk.example.com", None),
        ("bk-.example.com", None),
        ("bk..example.com", None),
        ("bk_1.example.com", None),
        ("::1", None),
        ("fe80::1", None),
        ("a" * 64 + ".com", None),
        ("", None),
        (3181, None),
        (None, None),
    ],
)
def test_host_forms(host: Any, accepted: str | None) -> None:
    doc = base()
    doc["regions"][0]["racks"][0]["bookies"][0]["host"] = host
    if accepted is None:
        problems = problems_of(doc)
        assert len(problems) == 1
        assert problems[0].startswith(
            "regions[0].racks[0].bookies[0].host: expected a DNS name or an IPv4 address "
            f"(IPv6 literals are not supported; name the host), got {repr(host)[:20]}"
        )
    else:
        topology = parse_topology(yaml.safe_dump(doc))
        assert topology.regions[0].racks[0].bookies[0].endpoint.host == accepted


def test_wan_profiles_that_are_not_a_mapping_are_a_problem_not_a_crash() -> None:
    doc = base()
    doc["wan"]["profiles"] = [[]]  # found by tests/unit/core/test_topology_fuzz.py
    problems = problems_of(doc)
    assert "wan.profiles: expected a mapping, got [[]]" in problems


def test_an_alias_bomb_is_refused_before_it_is_expanded() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 12)]
    lines.append("regions: *a11")  # 9^12 values: the loader hung before this check
    with pytest.raises(TopologyError) as refused:
        parse_topology("\n".join(lines), "bomb.yaml")
    assert refused.value.problems == (
        "the document expands to more than 100000 values through its aliases "
        "(&anchor / *alias); a topology has hundreds",
    )


def test_nesting_deeper_than_the_parser_is_refused_not_a_crash() -> None:
    with pytest.raises(TopologyError, match="nested deeper than the parser can follow"):
        parse_topology("[" * 3000 + "]" * 3000)


def test_a_few_aliases_still_load() -> None:
    doc = base()
    doc["wan"]["profiles"]["again"] = doc["wan"]["profiles"]["ci"]  # one list, twice
    text = yaml.safe_dump(doc)
    assert "&id001" in text and "*id001" in text
    topology = parse_topology(text)
    assert topology.emulated_wan.profiles["again"] == topology.emulated_wan.profiles["ci"]
