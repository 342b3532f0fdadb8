"""Per-host commands of a deployment (docs/deploy.md).

    globelog config zookeeper NAME [--data-dir D] [--write FILE]   zoo.cfg (and myid)
    globelog config bookie NAME [--data-dir D] [--write FILE]      bk.conf (and its dirs)
    globelog init                                                  BookKeeper's metadata
                                                                   root and the published
                                                                   topology, in ZooKeeper

Each reads the same topology.yaml as `globelog serve`; none of them needs the local launcher.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from cli import nodes
from cli.topology import load_checked_topology
from core.errors import ConfigError, MetadataUnavailableError
from core.routes import TOPOLOGY_ZNODE, encode_published, publish_topology
from core.topology import Topology
from global_meta import MetaStore
from ledger import LEDGERS_ROOT, init_cluster_metadata

DEFAULT_DATA_DIR = Path("/var/lib/globelog")


def add_arguments(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], default_topology: Path
) -> None:
    config = commands.add_parser(
        "config", help="print the ZooKeeper or BookKeeper configuration of one node"
    )
    roles = config.add_subparsers(dest="role", required=True)
    for role, text in (
        ("zookeeper", "zoo.cfg of a ZooKeeper node (--write also writes its myid)"),
        ("bookie", "bk.conf of a bookie (--write also makes its journal and ledger dirs)"),
    ):
        sub = roles.add_parser(role, help=text)
        sub.add_argument("name", metavar="NAME", help="the node's name in topology.yaml")
        sub.add_argument("--topology", type=Path, default=default_topology)
        sub.add_argument(
            "--data-dir",
            type=Path,
            default=DEFAULT_DATA_DIR,
            help=f"where the node keeps its data (default {DEFAULT_DATA_DIR})",
        )
        sub.add_argument(
            "--write", type=Path, default=None, metavar="FILE", help="write the file here"
        )
    init = commands.add_parser(
        "init", help="initialise BookKeeper's metadata and publish the topology to ZooKeeper"
    )
    init.add_argument("--topology", type=Path, default=default_topology)
    init.add_argument(
        "--zookeeper",
        default=None,
        metavar="HOST:PORT,...",
        help="the ZooKeeper nodes to connect to (default: every node of the topology)",
    )
    init.add_argument(
        "--wait-s",
        type=float,
        default=60.0,
        help="how long to wait for a serving ZooKeeper quorum (default 60)",
    )


def run_config(args: argparse.Namespace) -> int:
    topology = load_checked_topology(args.topology)
    data_dir = args.data_dir.absolute()
    written: list[Path] = []
    if args.role == "zookeeper":
        node = nodes.zookeeper_node(topology, args.name)
        text = nodes.zoo_cfg(topology, node, data_dir)
        if args.write is not None:
            myid, myid_text = nodes.myid_file(data_dir, node)
            _write(myid, myid_text)
            written.append(myid)
    else:
        bookie = nodes.bookie_named(topology, args.name)
        text = nodes.bookie_conf(topology, bookie, data_dir)
        if args.write is not None:
            for directory in nodes.bookie_dirs(data_dir, bookie):
                directory.mkdir(parents=True, exist_ok=True)
                written.append(directory)
    if args.write is None:
        sys.stdout.write(text)
        return 0
    _write(args.write, text)
    for path in [args.write, *written]:
        print(f"wrote {path}")
    return 0


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as err:
        raise ConfigError(f"cannot write {path}: {err.strerror}") from err


async def publish(store: MetaStore, topology: Topology) -> int:
    """Writes bookie locations and per-region dial addresses for every client to read;
    returns the znode's version."""
    data = encode_published(publish_topology(topology))
    stat = await store.exists(TOPOLOGY_ZNODE)
    if stat is None:
        await store.create(TOPOLOGY_ZNODE, data, make_parents=True)
        return 0
    return (await store.set(TOPOLOGY_ZNODE, data, version=stat.version)).version


async def init(topology: Topology, connect: str, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            store = await MetaStore.connect(
                connect, connect_timeout_s=max(1.0, min(10.0, deadline - time.monotonic()))
            )
            break
        except MetadataUnavailableError:
            # The ensemble may still be electing its leader (nodes started a moment ago).
            if time.monotonic() >= deadline:
                raise MetadataUnavailableError(
                    f"ZooKeeper {connect}: no serving quorum within {wait_s:.0f} s; are a "
                    "majority of the topology's ZooKeeper nodes running and reachable?"
                ) from None
            await asyncio.sleep(1.0)
    async with store:
        instance = await init_cluster_metadata(store)
        if instance is None:
            print(f"BookKeeper metadata at {LEDGERS_ROOT}: already initialised")
        else:
            print(f"BookKeeper metadata at {LEDGERS_ROOT}: created (instance id {instance})")
        version = await publish(store, topology)
        print(
            f"topology {topology.name!r} published at {TOPOLOGY_ZNODE} (version {version}): "
            f"{len(topology.regions)} regions, {len(topology.bookies)} bookies"
        )


def run_init(args: argparse.Namespace) -> int:
    topology = load_checked_topology(args.topology)
    if not 1 <= args.wait_s <= 3600:
        raise ConfigError(f"--wait-s {args.wait_s}: expected 1..3600 seconds")
    asyncio.run(init(topology, args.zookeeper or topology.zk_connect, args.wait_s))
    return 0
