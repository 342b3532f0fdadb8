"""`globelog init` on real ZooKeeper: BookKeeper's metadata root as BookKeeper's own shell makes it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import uuid
from pathlib import Path

import pytest

from cli.main import main
from core.errors import MetadataError
from core.routes import TOPOLOGY_ZNODE, PublishedBookie, decode_published, encode_published
from core.topology import Replication
from global_meta import MetaStore
from ledger import LedgerClient, LedgerConfig, init_cluster_metadata
from localcluster import nodes
from localcluster.controller import Cluster
from localcluster.tools import Tools

pytestmark = pytest.mark.integration


async def tree(store: MetaStore, path: str) -> dict[str, bytes]:
    """Every node under `path` (relative names) with its data."""
    found: dict[str, bytes] = {}

    async def walk(node: str) -> None:
        data, _ = await store.get(node)
        found[node.removeprefix(path) or "/"] = data
        for child in sorted(await store.children(node)):
            await walk(f"{node}/{child}")

    await walk(path)
    return found


def java_initnewcluster(
    tools: Tools, zk: str, root: str, home: Path, flags: tuple[str, ...]
) -> None:
    conf = home / "shell.conf"
    conf.write_text(
        f"metadataServiceUri=zk+hierarchical://{zk}{root}\nzkTimeout=10000\nzkEnableSecurity=true\n"
    )
    done = subprocess.run(
        [tools.java, "-Xmx256m", *flags, "-cp", tools.bookkeeper_classpath,
         "org.apache.bookkeeper.bookie.BookieShell", "-conf", str(conf), "initnewcluster"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def test_the_root_matches_bookkeepers_initnewcluster(
    cluster: Cluster, tools: Tools, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    java_root, our_root = f"/java-{run}/ledgers", f"/ours-{run}/ledgers"
    zk = cluster.topology.zookeeper[0].client.address

    async def parents() -> None:
        async with await MetaStore.of(cluster.topology) as store:
            await store.ensure_path(f"/java-{run}")
            await store.ensure_path(f"/ours-{run}")

    asyncio.run(parents())  # BookKeeper's shell creates the root, not its parents
    java_initnewcluster(
        tools, zk, java_root, tmp_path, nodes.java_zookeeper_flags(cluster.topology)
    )

    async def check() -> None:
        async with await MetaStore.of(cluster.topology) as store:
            instance = await init_cluster_metadata(store, our_root)
            java, ours = await tree(store, java_root), await tree(store, our_root)
            assert sorted(java) == sorted(ours)  # the same nodes
            assert ours["/LAYOUT"] == java["/LAYOUT"]
            assert {ours[k] for k in ours if k != "/INSTANCEID"} == {
                java[k] for k in java if k != "/INSTANCEID"
            }
            assert instance is not None and ours["/INSTANCEID"] == instance.encode()
            uuid.UUID(java["/INSTANCEID"].decode())  # both are UUIDs
            # idempotent, and it accepts the root BookKeeper's shell made
            assert await init_cluster_metadata(store, our_root) is None
            assert await init_cluster_metadata(store, java_root) is None

    asyncio.run(check())


def test_concurrent_inits_leave_one_instance_id(cluster: Cluster) -> None:
    root = f"/race-{uuid.uuid4().hex[:8]}"

    async def race() -> None:
        async with await MetaStore.of(cluster.topology) as store:
            await store.ensure_path(root)
            made = await asyncio.gather(
                *(init_cluster_metadata(store, f"{root}/ledgers") for _ in range(4))
            )
            assert sum(m is not None for m in made) == 1, made
            winner = next(m for m in made if m is not None)
            data, _ = await store.get(f"{root}/ledgers/INSTANCEID")
            assert data.decode() == winner

    asyncio.run(race())


def test_a_foreign_root_is_refused_untouched(cluster: Cluster) -> None:
    root = f"/foreign-{uuid.uuid4().hex[:8]}"

    async def check() -> None:
        async with await MetaStore.of(cluster.topology) as store:
            await store.ensure_path(f"{root}/ledgers/something-else")
            with pytest.raises(MetadataError, match="exists without an INSTANCEID"):
                await init_cluster_metadata(store, f"{root}/ledgers")
            assert await store.children(f"{root}/ledgers") == ["something-else"]
            await store.ensure_path(f"{root}/other/INSTANCEID")
            await store.create(f"{root}/other/LAYOUT", b"2\nsome.other.Factory:1")
            with pytest.raises(MetadataError, match=r"LAYOUT is .*some\.other\.Factory"):
                await init_cluster_metadata(store, f"{root}/other")

    asyncio.run(check())


def test_globelog_init_on_a_running_cluster_is_idempotent(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "--topology", str(cluster.topology_path)]) == 0
    out = capsys.readouterr().out
    assert "BookKeeper metadata at /ledgers: already initialised" in out
    assert f"topology '{cluster.topology.name}' published at {TOPOLOGY_ZNODE}" in out

    async def published() -> None:
        async with await MetaStore.of(cluster.topology) as store:
            data, _ = await store.get(TOPOLOGY_ZNODE)
            found = decode_published(data, TOPOLOGY_ZNODE)
            assert {b.bookie_id for b in found.bookies} == {
                b.bookie_id for b in cluster.topology.bookies
            }

    asyncio.run(published())


def test_running_clients_pick_up_a_republished_topology(cluster: Cluster) -> None:
    """A bookie added to the topology and republished (`globelog init`) is known to running
    clients without a restart: its location for placement, its address for connections."""
    newcomer = PublishedBookie("127.0.0.1:1", "bk-newcomer", "eu-west", "rack-c")

    async def check() -> None:
        async with await MetaStore.of(cluster.topology) as store:
            data, stat = await store.get(TOPOLOGY_ZNODE)
            original = decode_published(data, TOPOLOGY_ZNODE)
            config = LedgerConfig.of(cluster.topology, "us-east", min_regions_for_durability=2)
            async with await LedgerClient.connect(store, config) as client:
                assert newcomer.bookie_id not in client.context.placement.cluster.by_id
                grown = dataclasses.replace(
                    original,
                    bookies=(*original.bookies, newcomer),
                    addresses={
                        region: {**table, newcomer.bookie_id: "127.0.0.1:2"}
                        for region, table in original.addresses.items()
                    },
                )
                await store.set(TOPOLOGY_ZNODE, encode_published(grown), version=stat.version)
                try:
                    for _ in range(100):
                        known = client.context.placement.cluster.by_id.get(newcomer.bookie_id)
                        if known is not None:
                            break
                        await asyncio.sleep(0.05)
                    assert known is not None and (known.region, known.rack) == (
                        "eu-west", "rack-c"
                    )  # fmt: skip
                    assert client.published.address("us-east", newcomer.bookie_id) == (
                        "127.0.0.1:2"
                    )
                    # known but not registered: never chosen for a copy
                    ensemble = client.context.placement.new_ensemble(cluster_replication(cluster))
                    assert newcomer.bookie_id not in ensemble
                finally:
                    _, now = await store.get(TOPOLOGY_ZNODE)
                    await store.set(TOPOLOGY_ZNODE, data, version=now.version)

    asyncio.run(check())


def cluster_replication(cluster: Cluster) -> Replication:
    return cluster.topology.replication


def test_status_reports_each_node_and_exits_3_while_some_are_down(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    # the session cluster runs ZooKeeper and bookies but no proxies
    assert main(["status", "--topology", str(cluster.topology_path), "--json"]) == 3
    report = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in report["nodes"]}
    for node in cluster.topology.zookeeper:
        assert rows[node.name]["state"] == "up"
        assert rows[node.name]["detail"] in ("leader", "follower")
    for bookie in cluster.topology.bookies:
        assert rows[bookie.name]["state"] == "up", rows[bookie.name]
        assert rows[bookie.name]["detail"].startswith("registered writable, answers in ")
    proxies = [r for r in rows.values() if r["kind"] in ("write-proxy", "read-proxy")]
    assert proxies and all(r["state"] == "down" for r in proxies)
    assert report["down"] == len(proxies)
