"""A three-region deployment on separate hosts, set up the way docs/deploy.md walks through it.

Each host is a network namespace with its own address and name (tests/support/netns.py).
Every process is started with the documented per-role commands from the globelog wheel
installed by itself (no source checkout on the path, nothing from the local launcher):
`globelog config zookeeper|bookie` then ZooKeeper's and BookKeeper's own mains,
`globelog init`, `globelog serve write-proxy|read-proxy`, and the `globelog` client.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from core.topology_loader import load_topology
from localcluster import nodes
from localcluster.tools import REPO_ROOT, Tools, find_tools
from tests.support.netns import NetnsUnavailableError, Network, check_netns_available

pytestmark = pytest.mark.multihost

DOMAIN = "globelog.test"  # RFC 6761: never a real name
REGIONS = ("us-east", "us-west", "eu-west")
BOOKIE_PORT = 3181
WRITE_PORT, READ_PORT = 8080, 8081
BOOKIE_JVM = ("-Xmx256m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseSerialGC")
START_TIMEOUT_S = 150.0


EXAMPLE = REPO_ROOT / "deploy" / "topology.example.yaml"


def deployment_topology(home: Path) -> str:
    """docs/deploy.md's example deployment, on this test's host names, its security files in
    the test's directory (every host here reads the same file system)."""
    text = EXAMPLE.read_text().replace("example.com", DOMAIN)
    text = text.replace("/etc/globelog/security", str(home / "security"))
    doc = yaml.safe_load(text)
    # the hosts below are made for exactly this shape
    assert [r["name"] for r in doc["regions"]] == list(REGIONS)
    assert [z["host"] for z in doc["zookeeper"]] == [f"zk.{r}.{DOMAIN}" for r in REGIONS]
    assert "wan" not in doc
    return text


@dataclass
class Deployment:
    net: Network
    home: Path
    env: dict[str, str]
    globelog: str  # the installed wheel's console script
    lost: frozenset[str] = frozenset()  # hosts the test took down

    def cli(self, host: str, *args: str, stdin: bytes | None = None) -> str:
        done = self.net.run(host, [self.globelog, *args], self.env, stdin=stdin)
        if done.returncode != 0:
            raise AssertionError(
                f"on {host}: globelog {' '.join(args)} exited {done.returncode}:\n"
                f"{done.stdout.decode(errors='replace')}{done.stderr.decode(errors='replace')}"
                f"{self.logs()}"
            )
        return done.stdout.decode()

    def python(self, host: str, code: str) -> str:
        done = self.net.run(host, [sys.executable, "-c", code], self.env, timeout_s=60)
        return done.stdout.decode() if done.returncode == 0 else ""

    def wait(self, what: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            exited = self.net.exited(self.lost)
            if exited or time.monotonic() > deadline:
                raise AssertionError(
                    f"{what}: not ready after {START_TIMEOUT_S:.0f} s; exited: {exited}"
                    f"{self.logs()}"
                )
            time.sleep(1.0)

    def logs(self) -> str:
        tails = []
        for log in sorted((self.home / "logs").glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-6:]
            tails.append(f"\n--- {log.name}\n" + "\n".join(lines))
        return "".join(tails)


def install_wheel(target: Path) -> str:
    """Builds globelog's wheel and installs it (without its dependencies, which this Python
    has) into `target`; returns the path of its `globelog` script."""
    wheels = target / "wheels"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(wheels),
         str(REPO_ROOT)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob("globelog-*.whl")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
         str(target / "site"), str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return str(target / "site" / "bin" / "globelog")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tools = find_tools()
    home = tmp_path_factory.mktemp("multihost")
    globelog = install_wheel(home / "install")
    topology = home / "topology.yaml"
    topology.write_text(deployment_topology(home))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        # the installed package only: the source checkout is not on this path
        "PYTHONPATH": str(home / "install" / "site"),
        "GLOBELOG_TOPOLOGY": str(topology),
    }
    with Network(workdir=home) as net:
        for region in REGIONS:
            net.add_host(f"zk-{region}", (f"zk.{region}.{DOMAIN}",))
            for rack in ("a", "b"):
                net.add_host(f"bk-{region}-{rack}", (f"bk-{rack}.{region}.{DOMAIN}",))
            net.add_host(f"proxy-{region}", (f"proxy.{region}.{DOMAIN}",))
            net.add_host(f"app-{region}", (f"app.{region}.{DOMAIN}",))
        net.write_hosts_files()
        deployment = Deployment(net, home, env, globelog)
        start_cluster(deployment, tools)
        yield deployment


def start_cluster(d: Deployment, tools: Tools) -> None:
    logs = d.home / "logs"
    # 1. The deployment's keys, secrets and certificates, once (every host here reads the same
    # directory); ZooKeeper's nodes read their users from its JAAS file, bookies their login.
    d.cli("app-us-east", "security", "init")
    topology = load_topology(Path(d.env["GLOBELOG_TOPOLOGY"]))
    login = nodes.java_login_flag(topology)
    # 2. ZooKeeper: one node per region, a quorum across the three.
    for region in REGIONS:
        host, data = f"zk-{region}", d.home / "hosts" / f"zk-{region}"
        cfg = data / "zoo.cfg"
        d.cli(host, "config", "zookeeper", f"zk-{region}", "--data-dir", str(data),
              "--write", str(cfg))  # fmt: skip
        d.net.start(
            host,
            [tools.java, "-Xmx256m", "-XX:+UseSerialGC", login, "-cp", tools.zookeeper_classpath,
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
            logs / f"zk-{region}.log", d.env,
        )  # fmt: skip
    # 3. BookKeeper's metadata root and the topology, once, from any host.
    d.cli("app-us-east", "init", "--wait-s", "120")
    # 4. Bookies: two per region, on two racks.
    for region in REGIONS:
        for rack in ("a", "b"):
            name = f"bk-{region}-{rack}"
            data = d.home / "hosts" / name
            conf = data / "bk.conf"
            d.cli(name, "config", "bookie", name, "--data-dir", str(data), "--write", str(conf))
            # the JVM flags `config` wrote beside the conf (BOOKIE_EXTRA_OPTS), as units read them
            key, _, value = conf.with_suffix(".env").read_text().strip().partition("=")
            assert key == "BOOKIE_EXTRA_OPTS", key
            zk_client = value.strip('"').split()
            d.net.start(
                name,
                [tools.java, *BOOKIE_JVM, *zk_client, "-cp", tools.bookkeeper_classpath,
                 "org.apache.bookkeeper.server.Main", "--conf", str(conf)],
                logs / f"{name}.log", d.env,
            )  # fmt: skip
    d.wait("six bookies registered", lambda: len(up(d, "bookie")) == 6)
    # 5. Proxies: a write and a read proxy on each region's proxy host.
    for region in REGIONS:
        for kind in ("write-proxy", "read-proxy"):
            d.net.start(
                f"proxy-{region}",
                [d.globelog, "serve", kind, "--region", region, "--log-format", "text"],
                logs / f"{kind}-{region}.log", d.env,
            )  # fmt: skip
    d.wait("every node up", lambda: d.net.run("app-us-east", [d.globelog, "status"],
                                              d.env).returncode == 0)  # fmt: skip


def status(d: Deployment, host: str = "app-us-east") -> dict[str, dict[str, str]]:
    """`globelog status --json` on `host`: each node's row by name."""
    done = d.net.run(host, [d.globelog, "status", "--json"], d.env)
    assert done.returncode in (0, 3), done.stderr.decode(errors="replace")
    return {row["name"]: row for row in json.loads(done.stdout)["nodes"]}


def up(d: Deployment, kind: str) -> list[str]:
    return [name for name, row in status(d).items() if row["kind"] == kind and row["state"] == "up"]


def http_get(d: Deployment, host: str, url: str) -> dict[str, object] | None:
    token = (d.home / "security" / "admin.token").read_text().strip()
    ca = d.home / "security" / "ca.pem"
    code = (
        "import ssl, urllib.request\n"
        f"request = urllib.request.Request({url!r}, headers={{'Authorization': 'Bearer {token}'}})\n"
        f"context = ssl.create_default_context(cafile={str(ca)!r})\n"
        "print(urllib.request.urlopen(request, timeout=5, context=context).read().decode())\n"
    )
    out = d.python(host, code)
    return json.loads(out) if out else None


def test_the_package_runs_from_its_wheel_not_from_the_checkout(deployment: Deployment) -> None:
    code = "import cli, core, ledger; print(cli.__file__, ledger.__file__)"
    out = deployment.python("app-us-east", code)
    site = str(deployment.home / "install" / "site")
    assert out.split() and all(path.startswith(site) for path in out.split()), out
    # the console's script and style ship in the wheel: nothing is fetched at run time
    static = deployment.home / "install" / "site" / "console" / "static"
    assert (static / "console.js").is_file() and (static / "console.css").is_file()


def test_hosts_are_separate_and_named(deployment: Deployment) -> None:
    net = deployment.net
    addresses = {h.address for h in net.hosts.values()}
    assert len(addresses) == len(net.hosts) == 15
    # every node is up, a bookie registered under its host name, not a loopback address
    nodes = status(deployment, "app-eu-west")
    assert {row["state"] for row in nodes.values()} == {"up"}
    assert len(nodes) == 3 + 6 + 6
    assert sorted(row["address"] for row in nodes.values() if row["kind"] == "bookie") == sorted(
        f"bk-{rack}.{region}.{DOMAIN}:{BOOKIE_PORT}" for region in REGIONS for rack in ("a", "b")
    )
    # nothing of the test network exists in this machine's own namespace
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, check=True).stdout
    assert b"198.18.0." not in routes


def test_a_stream_written_in_one_region_is_read_on_another_host_in_another(
    deployment: Deployment,
) -> None:
    d = deployment
    records = [f"order-{i}" for i in range(200)]
    d.cli("app-us-east", "stream", "create", "orders", "--region", "us-east")
    written = d.cli(
        "app-us-east", "write", "orders", "--region", "us-east",
        stdin=("\n".join(records) + "\n").encode(),
    )  # fmt: skip
    acks = [json.loads(line) for line in written.splitlines()]
    assert [a["seq"] for a in acks] == list(range(len(records)))
    out = d.cli(
        "app-eu-west", "read", "orders", "--region", "eu-west", "--from-start",
        "--limit", str(len(records)), "--json",
    )  # fmt: skip
    read = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [r["payload"] for r in read] == records
    assert [r["seq"] for r in read] == list(range(len(records)))
    # the write went through us-east's write proxy, the read through eu-west's read proxy
    owner = http_get(d, "app-us-east", f"https://proxy.us-east.{DOMAIN}:{WRITE_PORT}/v1/health")
    assert owner is not None and "default/orders" in owner["owned"], owner
    reader = http_get(d, "app-eu-west", f"https://proxy.eu-west.{DOMAIN}:{READ_PORT}/v1/health")
    assert reader is not None and "default/orders" in reader["streams"], reader
    # every segment's ensemble holds copies in at least two regions, on the named bookies
    segments = json.loads(d.cli("app-eu-west", "segments", "orders", "--region", "eu-west",
                                "--json"))  # fmt: skip
    assert segments, "no segments"
    for segment in segments:
        for ensemble in segment["ensembles"]:
            assert ensemble["audit"] == "meets_strict", ensemble
            assert len({b["region"] for b in ensemble["bookies"]}) >= 2, ensemble
            assert all(
                b["bookie"].endswith(f".{DOMAIN}:{BOOKIE_PORT}") for b in ensemble["bookies"]
            )


def test_the_network_is_torn_down(tmp_path: Path) -> None:
    if shutil.which("ip") is None:
        pytest.fail("iproute2's `ip` is missing (Debian package iproute2)")
    with Network(prefix=f"gltd{os.getpid() % 10000}") as net:
        net.add_host("a", ("a.test",))
        net.add_host("b", ("b.test",))
        net.write_hosts_files()
        names = [h.namespace for h in net.hosts.values()]
        net.start("b", [sys.executable, "-m", "http.server", "8000"], tmp_path / "b.log",
                  {"PATH": "/usr/bin:/bin"})  # fmt: skip
        fetch = (
            "import time, urllib.request\n"
            "for _ in range(50):\n"
            "    try:\n"
            "        print(urllib.request.urlopen('http://b.test:8000/', timeout=2).status); break\n"
            "    except OSError:\n"
            "        time.sleep(0.1)\n"
        )
        got = net.run("a", [sys.executable, "-c", fetch], {"PATH": "/usr/bin:/bin"})
        assert got.stdout.strip() == b"200", got
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, check=True).stdout
    assert not any(name.encode() in listed for name in names)
    assert not any((Path("/etc/netns") / name).exists() for name in names)


def test_writes_go_on_with_a_region_lost_and_every_record_reads_back(
    deployment: Deployment,
) -> None:
    """Every host of us-west killed at once: the ZooKeeper majority, the bookies and the
    proxies of the two other regions carry on; nothing acknowledged is lost."""
    d = deployment
    d.cli("app-us-east", "stream", "create", "payments", "--region", "us-east")
    first = [f"payment-{i}" for i in range(100)]
    d.cli("app-us-east", "write", "payments", "--region", "us-east",
          stdin=("\n".join(first) + "\n").encode())  # fmt: skip
    lost = ("zk-us-west", "bk-us-west-a", "bk-us-west-b", "proxy-us-west", "app-us-west")
    d.lost = frozenset(lost)
    killed = [pid for host in lost for pid in d.net.kill_host(host)]
    assert len(killed) == 5, killed  # ZooKeeper, two bookies, two proxies
    d.wait(
        "a ZooKeeper quorum of us-east and eu-west",
        lambda: (
            {status(d)[n]["detail"] for n in ("zk-us-east", "zk-eu-west")} == {"leader", "follower"}
        ),
    )
    second = [f"payment-{i}" for i in range(100, 200)]
    written = d.cli("app-us-east", "write", "payments", "--region", "us-east",
                    stdin=("\n".join(second) + "\n").encode())  # fmt: skip
    out = d.cli("app-eu-west", "read", "payments", "--region", "eu-west", "--from-start",
                "--limit", "210", "--json")  # fmt: skip
    read = [json.loads(x) for x in out.splitlines()]
    acks = [json.loads(x) for x in written.splitlines()]
    assert [a["seq"] for a in acks] == list(range(100, 200)), (acks, read)
    assert [r["payload"] for r in read] == first + second
    # the records after the loss sit on the surviving regions' bookies, two regions each
    segments = json.loads(
        d.cli("app-eu-west", "segments", "payments", "--region", "eu-west", "--json")
    )
    last = segments[-1]["ensembles"][-1]
    assert {b["region"] for b in last["bookies"]} == {"us-east", "eu-west"}, last
    assert last["audit"] != "fail", last
    # status names what was lost, from a surviving region
    nodes = status(d, "app-eu-west")
    down = sorted(name for name, row in nodes.items() if row["state"] == "down")
    assert down == ["bk-us-west-a", "bk-us-west-b", "rp-us-west", "wp-us-west", "zk-us-west"]


def test_without_namespaces_the_test_fails_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No privilege to make namespaces is a failure with its reason, never a skip."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ip").write_text(
        "#!/bin/sh\necho 'mount --make-shared /run/netns failed: Operation not permitted' >&2\nexit 1\n"
    )
    (fake / "ip").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    with pytest.raises(NetnsUnavailableError) as caught:
        check_netns_available()
    message = str(caught.value)
    assert "cannot create one here (`ip netns add` exited 1: mount --make-shared" in message
    assert "it needs root or CAP_SYS_ADMIN and CAP_NET_ADMIN" in message
