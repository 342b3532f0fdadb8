"""`globelog rebuild status|disable|enable`: what is under-replicated and who rebuilds it."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from cli import reach
from global_meta import MetaStore
from ledger import LedgerClient, LedgerConfig, UnderReplication
from placement import load_checked_topology
from rebuild.status import format_status, rebuild_status


def add_arguments(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rebuild = commands.add_parser("rebuild", help="under-replicated ledgers and the rebuilders")
    rebuild.add_argument("--topology", default=os.environ.get("GLOBELOG_TOPOLOGY"))
    actions = rebuild.add_subparsers(dest="action", required=True)
    status = actions.add_parser("status", help="marked ledgers, claims, rebuilders, rate, ETA")
    status.add_argument("--json", action="store_true")
    actions.add_parser("disable", help="stop every rebuild worker claiming (cluster-wide)")
    actions.add_parser("enable", help="let the rebuild workers claim again")


def run(args: argparse.Namespace, default_topology: Path) -> int:
    topology = load_checked_topology(args.topology or default_topology)

    async def go() -> dict[str, Any] | None:
        await reach.require_zookeeper(topology)
        async with await MetaStore.connect(topology.zk_connect) as store:
            if args.action in ("disable", "enable"):
                under = UnderReplication(store)
                await under.ensure_layout()
                await under.set_disabled(args.action == "disable")
                return None
            config = LedgerConfig(
                region=topology.region_names[0],
                min_regions_for_durability=topology.replication.min_regions_for_durability,
            )
            async with await LedgerClient.connect(store, config) as client:
                return await rebuild_status(store, client)

    status = asyncio.run(go())
    if status is None:
        print(f"rebuilding {args.action}d cluster-wide")
        return 0
    print(json.dumps(status, indent=1, sort_keys=True) if args.json else format_status(status))
    return 3 if status["under_replicated_ledgers"] else 0
