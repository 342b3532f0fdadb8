"""A three-region deployment on separate hosts, set up the way docs/deploy.md walks through it.

Each host is a network namespace with its own address and name (tests/support/netns.py).
Every process is started with the documented per-role commands from the globelog wheel
installed by itself (no source checkout on the path, nothing from the local launcher):
`globelog config zookeeper|bookie` then ZooKeeper's and BookKeeper's own mains,
`globelog init`, `globelog serve write-proxy|read-proxy`, and the `globelog` client.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.topology_loader import load_topology
from localcluster import nodes
from localcluster.plan import ZK_LOG_TIMES
from localcluster.tools import REPO_ROOT, Tools, find_tools
from membership.changes import REMOVE_STEPS
from tests.support.netns import NetnsUnavailableError, Network, check_netns_available

pytestmark = pytest.mark.multihost

DOMAIN = "globelog.test"  # RFC 6761: never a real name
REGIONS = ("us-east", "us-west", "eu-west")
BOOKIE_PORT = 3181
WRITE_PORT, READ_PORT = 8080, 8081
BOOKIE_JVM = ("-Xmx256m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseSerialGC")
START_TIMEOUT_S = 150.0
ZK_LOG_LINES_ON_FAILURE = 60


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
            [tools.java, "-Xmx256m", "-XX:+UseSerialGC", *ZK_LOG_TIMES, login, "-cp",
             tools.zookeeper_classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain",
             str(cfg)],
            logs / f"zk-{region}.log", d.env,
        )  # fmt: skip
    # 3. BookKeeper's metadata root and the topology, once, from any host.
    d.cli("app-us-east", "init", "--wait-s", "120")
    # 4. Bookies: two per region, on two racks.
    for region in REGIONS:
        for rack in ("a", "b"):
            start_bookie(d, tools, f"bk-{region}-{rack}")
    d.wait("six bookies registered", lambda: len(up(d, "bookie")) == 6)
    # 5. Proxies: a write and a read proxy on each region's proxy host.
    for region in REGIONS:
        serve_on_proxy_host(d, region, ("write-proxy", "read-proxy"))
    d.wait("every node up", lambda: d.net.run("app-us-east", [d.globelog, "status"],
                                              d.env).returncode == 0)  # fmt: skip


def start_bookie(d: Deployment, tools: Tools, name: str) -> None:
    """`globelog config bookie`, then BookKeeper's own main with the JVM flags `config` wrote
    beside the conf (BOOKIE_EXTRA_OPTS), as the units read them."""
    data = d.home / "hosts" / name
    conf = data / "bk.conf"
    d.cli(name, "config", "bookie", name, "--data-dir", str(data), "--write", str(conf))
    key, _, value = conf.with_suffix(".env").read_text().strip().partition("=")
    assert key == "BOOKIE_EXTRA_OPTS", key
    d.net.start(
        name,
        [tools.java, *BOOKIE_JVM, *value.strip('"').split(), "-cp", tools.bookkeeper_classpath,
         "org.apache.bookkeeper.server.Main", "--conf", str(conf)],
        d.home / "logs" / f"{name}.log", d.env,
    )  # fmt: skip


def serve_on_proxy_host(d: Deployment, region: str, kinds: tuple[str, ...]) -> None:
    """`globelog serve KIND --region R` on the region's proxy host (proxies, rebuilder)."""
    for kind in kinds:
        d.net.start(
            f"proxy-{region}",
            [d.globelog, "serve", kind, "--region", region, "--log-format", "text"],
            d.home / "logs" / f"{kind}-{region}.log", d.env,
        )  # fmt: skip


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


NEW_REGION = "ap-south"
REGION_FILE = """\
# the region that joins: its racks, bookies, proxies and ZooKeeper node
region:
  name: ap-south
  racks:
    - name: rack-a
      bookies: [{{name: bk-ap-south-a, host: bk-a.ap-south.{d}, port: 3181}}]
    - name: rack-b
      bookies: [{{name: bk-ap-south-b, host: bk-b.ap-south.{d}, port: 3181}}]
  write_proxies: [{{name: wp-ap-south, host: proxy.ap-south.{d}, port: 8080}}]
  read_proxies: [{{name: rp-ap-south, host: proxy.ap-south.{d}, port: 8081}}]
zookeeper:
  - {{name: zk-ap-south, region: ap-south, host: zk.ap-south.{d}, client_port: 2181,
     peer_port: 2888, election_port: 3888}}
"""
LIVE_WRITER = """\
import os, sys, time
stop = sys.argv[1]
i = 0
while not os.path.exists(stop):
    print(f"live-{i}", flush=True)
    i += 1
    time.sleep(0.05)
"""
STAMPER = (
    "import sys, time\nfor line in sys.stdin:\n    print(time.time(), line, end='', flush=True)\n"
)


def region_cli(d: Deployment, *args: str) -> tuple[int, str]:
    """`globelog region ARGS` on us-east's app host: its exit code and output, followed, when
    it failed, by the end of every ZooKeeper node's log (region changes reconfigure them)."""
    done = d.net.run("app-us-east", [d.globelog, "region", *args], d.env, timeout_s=600)
    out = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    if done.returncode != 0:
        for log in sorted((d.home / "logs").glob("zk-*.log")):
            tail = log.read_text(errors="replace").splitlines()[-ZK_LOG_LINES_ON_FAILURE:]
            out += f"\n--- {log.name}\n" + "\n".join(tail)
    return done.returncode, out


def start_region_hosts(d: Deployment, tools: Tools, region: str) -> None:
    """The joining region's bookies, proxies and rebuilder, each started with the per-role
    commands from the merged topology file."""
    for rack in ("a", "b"):
        start_bookie(d, tools, f"bk-{region}-{rack}")
    serve_on_proxy_host(d, region, ("write-proxy", "read-proxy", "rebuilder"))


def segments_of(d: Deployment, host: str, region: str, stream: str) -> list[dict[str, Any]]:
    return json.loads(d.cli(host, "segments", stream, "--region", region, "--json"))


def read_all(d: Deployment, host: str, region: str, stream: str, limit: int) -> list[str]:
    out = d.cli(host, "read", stream, "--region", region, "--from-start", "--limit", str(limit),
                "--json")  # fmt: skip
    return [json.loads(x)["payload"] for x in out.splitlines() if x.strip()]


@dataclass
class LiveWriter:
    """A producer writing one line every 50 ms through `globelog write` on an app host; each
    acknowledgement is stamped with the time it came."""

    process: subprocess.Popen[bytes]
    acks: Path
    stop: Path

    @classmethod
    def start(cls, d: Deployment, region: str, stream: str) -> LiveWriter:
        host, stop, acks = f"app-{region}", d.home / f"stop-{stream}", d.home / f"{stream}.acks"
        d.cli(host, "stream", "create", stream, "--region", region)
        pipeline = (f"{sys.executable} -c '{LIVE_WRITER.replace('live-', stream + '-')}' {stop} | "
                    f"{d.globelog} write {stream} --region {region} | "
                    f"{sys.executable} -c \"{STAMPER}\" > {acks}")  # fmt: skip
        process = subprocess.Popen(d.net.argv(host, ["sh", "-c", pipeline]), env=d.env,
                                   stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        return cls(process, acks, stop)

    def finish(self) -> tuple[int, float]:
        """Stops the producer; how many writes were acknowledged, and the longest time
        between two acknowledgements."""
        self.stop.write_text("")
        self.process.wait(timeout=120)
        times = [float(line.split(" ", 1)[0]) for line in self.acks.read_text().splitlines()]
        return len(times), max(b - a for a, b in itertools.pairwise(times))


def join_new_region(d: Deployment, tools: Tools) -> None:
    """ap-south's hosts, its file merged into the topology, its ZooKeeper node joined by
    reconfiguration, its bookies and proxies registered: three runs of `region add`."""
    logs = d.home / "logs"
    d.net.add_host(f"zk-{NEW_REGION}", (f"zk.{NEW_REGION}.{DOMAIN}",))
    for rack in ("a", "b"):
        d.net.add_host(f"bk-{NEW_REGION}-{rack}", (f"bk-{rack}.{NEW_REGION}.{DOMAIN}",))
    d.net.add_host(f"proxy-{NEW_REGION}", (f"proxy.{NEW_REGION}.{DOMAIN}",))
    d.net.add_host(f"app-{NEW_REGION}", (f"app.{NEW_REGION}.{DOMAIN}",))
    d.net.write_hosts_files()
    region_file = d.home / "ap-south.yaml"
    region_file.write_text(REGION_FILE.format(d=DOMAIN))
    code, out = region_cli(d, "add", "--from", str(region_file))
    assert code == 3 and "zk-ap-south does not answer" in out, out
    topology = load_topology(Path(d.env["GLOBELOG_TOPOLOGY"]))
    assert NEW_REGION in topology.region_names
    d.cli("app-us-east", "security", "init")  # certificates for the new hosts
    data = d.home / "hosts" / f"zk-{NEW_REGION}"
    d.cli(f"zk-{NEW_REGION}", "config", "zookeeper", f"zk-{NEW_REGION}", "--data-dir", str(data),
          "--write", str(data / "zoo.cfg"))  # fmt: skip
    d.net.start(
        f"zk-{NEW_REGION}",
        [tools.java, "-Xmx256m", "-XX:+UseSerialGC", *ZK_LOG_TIMES,
         nodes.java_login_flag(topology), "-cp", tools.zookeeper_classpath,
         "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(data / "zoo.cfg")],
        logs / f"zk-{NEW_REGION}.log", d.env,
    )  # fmt: skip
    d.wait("zk-ap-south serving", lambda: status(d)["zk-ap-south"]["state"] == "up")
    code, out = region_cli(d, "add", NEW_REGION, "--wait-s", "0")
    assert code == 3 and "published done" in out and "bk-ap-south-a" in out, out
    start_region_hosts(d, tools, NEW_REGION)
    code, out = region_cli(d, "add", NEW_REGION, "--wait-s", "120")
    assert code == 0 and "region ap-south is in service" in out, out


def remove_step_by_step(d: Deployment, region: str) -> None:
    """Each run stops after one step (as if interrupted there); the next goes on."""
    code, out = region_cli(d, "remove", region, "--check")
    assert code == 0, out
    for step in REMOVE_STEPS:
        code, out = region_cli(d, "remove", region, "--until", step, "--wait-s", "300")
        assert code == 0 and f"{step} done" in out, (step, out)
    assert f"region {region} is removed" in out, out  # the last step finished it
    code, out = region_cli(d, "remove", region)
    assert code == 0 and f"region {region} was removed already" in out, out


def remove_killing_a_run_at_each_step(d: Deployment, region: str) -> None:
    """For each step in turn: the steps before it done (a run with --until), then a run
    killed (SIGKILL) as it starts that step, and for copies-moved also one two seconds into
    it (bookies decommissioned, copies moving). The last run goes on from there and finishes,
    each time after the killed run's lock went with its session."""
    for index, step in enumerate(REMOVE_STEPS):
        if index:
            code, out = region_cli(d, "remove", region, "--until", REMOVE_STEPS[index - 1])
            assert code == 0, out
        for delay_s in (0.0, 2.0) if step == "copies-moved" else (0.0,):
            log = d.home / f"remove-{region}-{step}-{delay_s:.0f}.log"
            with log.open("wb") as out_file:
                run = subprocess.Popen(
                    d.net.argv("app-us-east", [d.globelog, "region", "remove", region]),
                    stdout=out_file, stderr=subprocess.STDOUT, env=d.env,
                    start_new_session=True,
                )  # fmt: skip
                deadline = time.monotonic() + 120
                while f"{step} ..." not in log.read_text():
                    assert run.poll() is None, log.read_text()
                    assert time.monotonic() < deadline, log.read_text()
                    time.sleep(0.05)
                time.sleep(delay_s)
                run.kill()
                run.wait(timeout=10)
    code, out = region_cli(d, "remove", region)
    assert code == 0, out
    assert f"region {region} is removed" in out or f"{region} was removed already" in out, out


def test_a_region_joins_and_two_leave_while_writes_go_on(deployment: Deployment) -> None:
    """After us-west's loss (the test above): ap-south joins, the lost us-west is removed one
    step per run, then eu-west is removed while producers write (one of them to a stream
    eu-west owns), a run of it killed in each step. Then eu-west's hosts are killed: every
    record reads back in ap-south and every ensemble is on us-east and ap-south."""
    d = deployment
    for region in ("us-east", "eu-west"):  # the rebuilders that re-make the leaving copies
        serve_on_proxy_host(d, region, ("rebuilder",))
    join_new_region(d, find_tools())
    # new segments place copies in ap-south (a writer in us-east: us-west is down)
    d.cli("app-us-east", "stream", "create", "joined", "--region", "us-east")
    d.cli("app-us-east", "write", "joined", "--region", "us-east",
          stdin=b"".join(f"joined-{i}\n".encode() for i in range(50)))  # fmt: skip
    last = segments_of(d, "app-ap-south", NEW_REGION, "joined")[-1]["ensembles"][-1]
    assert NEW_REGION in {b["region"] for b in last["bookies"]}, last
    assert last["audit"] == "meets_strict", last
    remove_step_by_step(d, "us-west")
    writers = {"live": LiveWriter.start(d, "us-east", "live"),
               "leaving": LiveWriter.start(d, "eu-west", "leaving")}  # fmt: skip
    try:
        time.sleep(3)
        remove_killing_a_run_at_each_step(d, "eu-west")
        time.sleep(2)
    finally:
        written = {name: writer.finish() for name, writer in writers.items()}
    logs = d.home / "logs"
    # the stream eu-west owned moved to another region; the one written from us-east rolled
    # its segment off eu-west's bookie instead of waiting for its next natural roll
    assert (
        "released drained stream default/leaving" in (logs / "write-proxy-eu-west.log").read_text()
    )
    assert (
        "rolling stream default/live off leaving" in (logs / "write-proxy-us-east.log").read_text()
    )
    for name, (count, longest) in written.items():
        print(f"stream {name}: {count} writes acknowledged, longest time between two "
              f"acknowledgements while eu-west was removed: {longest:.2f} s")  # fmt: skip
        assert count > 50, (name, count)
    # nothing of eu-west is needed any more: its hosts killed, every record reads back
    gone = ("zk-eu-west", "bk-eu-west-a", "bk-eu-west-b", "proxy-eu-west", "app-eu-west")
    for host in gone:
        d.net.kill_host(host)
    d.lost = d.lost | set(gone)
    expected = {name: [f"{name}-{i}" for i in range(count)] for name, (count, _) in written.items()}
    expected["orders"] = [f"order-{i}" for i in range(200)]
    expected["payments"] = [f"payment-{i}" for i in range(200)]
    expected["joined"] = [f"joined-{i}" for i in range(50)]
    for region in ("us-east", NEW_REGION):  # every region left, through its read proxy
        for name, records in expected.items():
            read = read_all(d, f"app-{region}", region, name, len(records) + 10)
            assert read == records, (region, name, len(read), len(records), read[-3:])
    d.cli("app-us-east", "write", "live", "--region", "us-east", stdin=b"after-0\n")
    for stream in ("orders", "payments", "joined", "live", "leaving"):
        for segment in segments_of(d, "app-ap-south", NEW_REGION, stream):
            for ensemble in segment["ensembles"]:
                regions = {b["region"] for b in ensemble["bookies"]}
                assert regions == {"us-east", NEW_REGION}, (stream, ensemble)
                assert ensemble["audit"] != "fail", (stream, ensemble)
    report = json.loads(region_cli(d, "status", "--json")[1])
    changes, members = report["changes"], report["zookeeper"]
    assert {(c["kind"], c["region"]) for c in changes} == {
        ("add", NEW_REGION), ("remove", "us-west"), ("remove", "eu-west")
    }  # fmt: skip
    assert all(c["finished_ms"] for c in changes), changes
    assert sorted(members) == ["1", "4"], members  # ZooKeeper: us-east's node and ap-south's
    # removing either region left would break the rule: refused, saying why
    code, out = region_cli(d, "remove", NEW_REGION)
    assert code == 2 and "cannot be kept over the 1 region(s) left" in out, out
    assert "Add a region first" in out, out
