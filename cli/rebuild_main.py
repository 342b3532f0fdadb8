"""`globelog rebuild status|disable|enable` and `globelog bookie list|decommission`: what is
under-replicated, who rebuilds it, and taking a bookie out of service."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from cli import reach
from core.topology import Topology
from global_meta import MetaStore
from ledger import LedgerClient, LedgerConfig, UnderReplication
from membership.changes import check_decommission
from placement import load_checked_topology
from rebuild.bookies import bookie_id_of, bookie_list, decommission, ledgers_on
from rebuild.status import format_status, rebuild_status


def add_arguments(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rebuild = commands.add_parser("rebuild", help="under-replicated ledgers and the rebuilders")
    rebuild.add_argument("--topology", default=os.environ.get("GLOBELOG_TOPOLOGY"))
    actions = rebuild.add_subparsers(dest="action", required=True)
    status = actions.add_parser("status", help="marked ledgers, claims, rebuilders, rate, ETA")
    status.add_argument("--json", action="store_true")
    actions.add_parser("disable", help="stop every rebuild worker claiming (cluster-wide)")
    actions.add_parser("enable", help="let the rebuild workers claim again")
    bookie = commands.add_parser("bookie", help="the bookies' holdings; decommissioning one")
    bookie.add_argument("--topology", default=os.environ.get("GLOBELOG_TOPOLOGY"))
    bookie_actions = bookie.add_subparsers(dest="action", required=True)
    listing = bookie_actions.add_parser(
        "list", help="each bookie's state, ledgers, bytes, under-replicated ledgers"
    )
    listing.add_argument("--json", action="store_true")
    leave = bookie_actions.add_parser(
        "decommission", help="re-make a bookie's copies elsewhere, then say it is safe to stop"
    )
    leave.add_argument("name", help="its topology name or id (host:port)")
    leave.add_argument("--no-wait", action="store_true", help="mark it and return")
    leave.add_argument("--undo", action="store_true", help="take it back into service")
    leave.add_argument("--force", action="store_true", help="go on past the safety check")
    leave.add_argument("--timeout-s", type=float, default=DECOMMISSION_WAIT_S)


DECOMMISSION_WAIT_S = 1800.0
POLL_S = 2.0


def run(args: argparse.Namespace, default_topology: Path) -> int:
    topology = load_checked_topology(args.topology or default_topology)
    if args.command == "bookie":
        return asyncio.run(_bookie(args, topology))

    async def go() -> dict[str, Any] | None:
        await reach.require_zookeeper(topology)
        async with await MetaStore.of(topology) as store:
            if args.action in ("disable", "enable"):
                under = UnderReplication(store)
                await under.ensure_layout()
                await under.set_disabled(args.action == "disable")
                return None
            config = LedgerConfig.of(topology, topology.region_names[0])
            async with await LedgerClient.connect(store, config) as client:
                return await rebuild_status(store, client)

    status = asyncio.run(go())
    if status is None:
        print(f"rebuilding {args.action}d cluster-wide")
        return 0
    print(json.dumps(status, indent=1, sort_keys=True) if args.json else format_status(status))
    return 3 if status["under_replicated_ledgers"] else 0


@asynccontextmanager
async def _connected(topology: Topology) -> AsyncIterator[tuple[MetaStore, LedgerClient]]:
    await reach.require_zookeeper(topology)
    config = LedgerConfig.of(topology, topology.region_names[0])
    async with (
        await MetaStore.of(topology) as store,
        await LedgerClient.connect(store, config) as client,
    ):
        yield store, client


async def _bookie(args: argparse.Namespace, topology: Topology) -> int:
    async with _connected(topology) as (store, client):
        if args.action == "list":
            rows = await bookie_list(topology, store, client)
            if args.json:
                print(json.dumps(rows, indent=1))
            else:
                for r in rows:
                    print(
                        f"{r['name']:<14} {r['bookie_id']:<22} {r['region'] or '-':<9} "
                        f"{r['rack'] or '-':<8} {r['state']:<15} {r['ledgers']:>6} ledgers "
                        f"{r['bytes']:>12} bytes {r['under_replicated']:>5} under-replicated"
                    )
            return 0
        bookie_id = bookie_id_of(topology, args.name)
        if not args.undo:
            report = await check_decommission(store, client, topology, bookie_id)
            print("\n".join(f"  {line}" for line in report.lines()), flush=True)
            if not report.safe and not args.force:
                print(
                    f"globelog: decommissioning {args.name} refused by the safety check "
                    "(nothing was changed); --force goes on regardless",
                    file=sys.stderr,
                )
                return 2
        await decommission(store, bookie_id, undo=args.undo)
        if args.undo:
            print(f"{args.name} ({bookie_id}) is back in service")
            return 0
        print(f"decommissioning {args.name} ({bookie_id}): no new copies go to it", flush=True)
        if args.no_wait:
            return 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + args.timeout_s
        while remaining := await ledgers_on(client, bookie_id):
            if loop.time() > deadline:
                print(
                    f"globelog: {len(remaining)} ledgers still hold copies on {bookie_id} after "
                    f"{args.timeout_s:.0f} s (open ones wait for their writer's roll): "
                    f"{remaining[:20]}",
                    file=sys.stderr,
                )
                return 3
            print(f"  {len(remaining)} ledgers still hold copies on it", flush=True)
            await asyncio.sleep(POLL_S)
        print(f"{args.name} ({bookie_id}) holds no copy any ledger needs: safe to stop")
        return 0
