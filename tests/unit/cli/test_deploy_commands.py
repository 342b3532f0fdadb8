"""`globelog config`, `globelog topology check` and the local launcher on a deployment's topology."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from cli.main import main
from cli.topology import default_topology_path
from core.topology_loader import load_topology
from localcluster import nodes
from tests.support.topologies import topology_document

pytestmark = pytest.mark.unit

DOMAIN = "prod.example.com"


def deployment_file(tmp_path: Path) -> Path:
    """The test topology's shape on named hosts, ZooKeeper's standard ports, no WAN section."""
    doc = topology_document()
    del doc["wan"]
    for node in doc["zookeeper"]:  # type: ignore[union-attr]
        node.update(host=f"{node['name']}.{DOMAIN}", client_port=2181, peer_port=2888,
                    election_port=3888)  # fmt: skip
    for region in doc["regions"]:  # type: ignore[union-attr]
        for rack in region["racks"]:
            for bookie in rack["bookies"]:
                bookie.update(host=f"{bookie['name']}.{DOMAIN}", port=3181)
        for kind in ("write_proxies", "read_proxies"):
            for proxy in region[kind]:
                proxy.update(host=f"proxies.{region['name']}.{DOMAIN}")
    path = tmp_path / "prod.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_deployment_topology_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["topology", "check", str(deployment_file(tmp_path))]) == 0
    assert "3 regions, 6 bookies, 3 ZooKeeper nodes" in capsys.readouterr().out


def test_cluster_up_refuses_it_with_the_reason_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = deployment_file(tmp_path)
    data = tmp_path / "data"
    assert main(["cluster", "--topology", str(path), "--data-dir", str(data), "up"]) == 1
    err = capsys.readouterr().err
    assert f"{path}: " in err and "problem(s)" in err
    assert f"zookeeper node zk-us-east: host 'zk-us-east.{DOMAIN}' is not a loopback address" in err
    assert "keeps its traffic on loopback, so it takes 127.x.y.z or localhost only" in err
    assert "wan: missing; the local cluster emulates the WAN" in err
    assert "`globelog config`, `globelog init` and `globelog serve` (docs/deploy.md)" in err
    assert not data.exists() or not any(data.iterdir())


def test_config_zookeeper_names_every_peer_by_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = deployment_file(tmp_path)
    data = tmp_path / "zk"
    assert main(["config", "zookeeper", "zk-us-west", "--topology", str(path),
                 "--data-dir", str(data)]) == 0  # fmt: skip
    cfg = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines() if "=" in line)
    # TLS only on the network (the deployment's default), the host's own certificate; the
    # plain port reconfiguration needs listens on loopback alone
    assert cfg["secureClientPortAddress"] == f"zk-us-west.{DOMAIN}"
    assert cfg["secureClientPort"] == "2181"
    assert (cfg["clientPort"], cfg["clientPortAddress"]) == ("12181", "127.0.0.1")
    # members join and leave by reconfiguration, which the deployment's login may run
    assert (cfg["reconfigEnabled"], cfg["superUser"]) == ("true", "globelog")
    assert cfg["ssl.keyStore.location"].endswith(f"hosts/zk-us-west.{DOMAIN}.bundle.pem")
    assert cfg["enforce.auth.enabled"] == "true" and cfg["enforce.auth.schemes"] == "sasl"
    assert cfg["dataDir"] == str(data / "zookeeper" / "zk-us-west" / "data")
    assert [cfg[f"server.{i}"] for i in (1, 2, 3)] == [
        f"zk-{r}.{DOMAIN}:2888:3888" for r in ("us-east", "us-west", "eu-west")
    ]
    # WAN-tolerant timings: heartbeats every 2 s, 10 s of sync slack
    assert (cfg["tickTime"], cfg["syncLimit"]) == ("2000", "5")


def test_config_zookeeper_write_puts_the_myid_beside_the_data(tmp_path: Path) -> None:
    path = deployment_file(tmp_path)
    data = tmp_path / "zk"
    out = tmp_path / "etc" / "zoo.cfg"
    assert main(["config", "zookeeper", "zk-eu-west", "--topology", str(path), "--data-dir",
                 str(data), "--write", str(out)]) == 0  # fmt: skip
    assert out.read_text().startswith("# ZooKeeper node zk-eu-west (eu-west)")
    assert (data / "zookeeper" / "zk-eu-west" / "data" / "myid").read_text() == "3\n"


def test_config_bookie_registers_by_host_name_with_its_regions_zookeeper(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = deployment_file(tmp_path)
    data = tmp_path / "bk"
    conf = tmp_path / "bk.conf"
    name = "bk-uw-a0"
    assert main(["config", "bookie", name, "--topology", str(path), "--data-dir", str(data),
                 "--write", str(conf)]) == 0  # fmt: skip
    lines = conf.read_text().splitlines()
    cfg = dict(line.split("=", 1) for line in lines if "=" in line)
    assert cfg["advertisedAddress"] == f"{name}.{DOMAIN}"
    assert cfg["bookiePort"] == "3181"
    assert cfg["useHostNameAsBookieID"] == "false"
    assert cfg["metadataServiceUri"] == f"zk+hierarchical://zk-us-west.{DOMAIN}:2181/ledgers"
    assert cfg["journalSyncData"] == "true"
    # a real host: bound to every interface, not loopback-only, not the local disk overrides
    assert not {"allowLoopback", "listeningInterface", "diskUsageThreshold"} & set(cfg)
    assert (data / "bookies" / name / "journal").is_dir()
    assert (data / "bookies" / name / "ledgers").is_dir()
    assert str(conf) in capsys.readouterr().out
    # the JVM flags beside it, as a shell (and systemd) reads them
    env = conf.with_suffix(".env")
    shown = subprocess.run(
        ["sh", "-c", f'. "{env}"; printf %s "$BOOKIE_EXTRA_OPTS"'],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    topology = load_topology(path)
    assert shown == list(nodes.java_zookeeper_flags(topology))
    assert any(flag.startswith("-Djava.security.auth.login.config=") for flag in shown)


def test_config_of_an_unknown_node_lists_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = deployment_file(tmp_path)
    assert main(["config", "bookie", "bk-nowhere", "--topology", str(path)]) == 1
    err = capsys.readouterr().err
    assert "no bookie 'bk-nowhere' in topology" in err and "bk-ue-a0" in err
    assert main(["config", "zookeeper", "zk-mars", "--topology", str(path)]) == 1
    assert "nodes: ['zk-us-east', 'zk-us-west', 'zk-eu-west']" in capsys.readouterr().err


def test_init_refuses_a_nonsense_wait(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = deployment_file(tmp_path)
    assert main(["init", "--topology", str(path), "--wait-s", "0"]) == 1
    assert "--wait-s 0.0: expected 1..3600 seconds" in capsys.readouterr().err


def test_the_default_topology_is_named_by_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GLOBELOG_TOPOLOGY", str(tmp_path / "t.yaml"))
    assert default_topology_path() == tmp_path / "t.yaml"
    monkeypatch.delenv("GLOBELOG_TOPOLOGY")
    assert default_topology_path().name == "topology.yaml"
