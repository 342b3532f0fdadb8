"""Per-host commands of a deployment (docs/deploy.md).

    globelog config zookeeper NAME [--data-dir D] [--write FILE]   zoo.cfg (and myid)
    globelog config bookie NAME [--data-dir D] [--write FILE]      bk.conf (and its dirs)
    globelog init                                                  BookKeeper's metadata
                                                                   root and the published
                                                                   topology, in ZooKeeper
    globelog status [--json]                                       every node of the
                                                                   topology: serving or not

Each reads the same topology.yaml as `globelog serve`; none of them needs the local launcher.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from console.health import deployment_status, under_replicated
from core.errors import ConfigError, MetadataUnavailableError
from core.routes import TOPOLOGY_ZNODE
from core.security.secrets import zk_login
from core.topology import Topology
from global_meta import MetaStore, tokens
from ledger import (
    LEDGERS_ROOT,
    init_cluster_metadata,
)
from localcluster import nodes
from localcluster.metadata import publish
from localcluster.probes import DEGRADED
from placement import load_checked_topology

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

    status = commands.add_parser(
        "status", help="every ZooKeeper node, bookie and proxy of the topology: serving or not"
    )
    status.add_argument("--topology", type=Path, default=default_topology)
    status.add_argument("--json", action="store_true")


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
            # the bookie's JVM flags (its ZooKeeper login and TLS), for BookKeeper's launcher:
            # the systemd unit's EnvironmentFile, the container's entry point
            env = args.write.with_suffix(".env")
            _write(env, nodes.bookie_env(topology))
            written.append(env)
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


async def init(topology: Topology, connect: str, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            store = await MetaStore.connect(
                connect,
                zk_login(topology.security),
                connect_timeout_s=max(1.0, min(10.0, deadline - time.monotonic())),
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
        admin = await tokens.record_admin_token(store, topology.security, time.time())
        if admin is not None:
            print(f"admin token {admin} on record (globelog token list, token revoke)")
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


def run_status(args: argparse.Namespace) -> int:
    """Prints every node's state; exit 0 when all are up, 3 when some are not (down, or a
    proxy degraded: answering, with a follower not following, named with its cause)."""
    topology = load_checked_topology(args.topology)
    rows = asyncio.run(deployment_status(topology))
    serving = any(r["kind"] == "zookeeper" and r["state"] == "up" for r in rows)
    marked = asyncio.run(under_replicated(topology)) if serving else None
    down = [row for row in rows if row["state"] != "up"]
    if args.json:
        report = {"topology": topology.name, "nodes": rows, "down": len(down)}
        print(json.dumps({**report, "under_replicated_ledgers": marked}, indent=1))
    else:
        for row in rows:
            print(
                f"{row['kind']:<11} {row['name']:<16} {row['region']:<10} {row['address']:<28} "
                f"{row['state']:<5} {row['detail']}"
            )
        degraded = sum(row["state"] == DEGRADED for row in rows)
        if marked:
            print(f"{marked} ledgers under-replicated: see `globelog rebuild status`")
        print(
            f"{len(rows) - len(down)} of {len(rows)} up"
            + (f"; {len(down) - degraded} down" if len(down) > degraded else "")
            + (f"; {degraded} {DEGRADED}" if degraded else "")
        )
    return 3 if down else 0
