"""`globelog region add|remove|status`: regions joining and leaving a running deployment
(membership/; docs/deploy.md walks through both)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from membership import commands
from membership.changes import ADD_STEPS, REMOVE_STEPS

WAIT_S = 1800.0  # how long one run waits for a step that waits (streams, copies, bookies)


def add_arguments(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    region = commands.add_parser("region", help="add or remove a region of a running system")
    region.add_argument("--topology", default=os.environ.get("GLOBELOG_TOPOLOGY"))
    actions = region.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="join a region (its file merged into the topology)")
    add.add_argument("name", nargs="?", help="a region the topology file lists already")
    add.add_argument("--from", dest="region_file", type=Path, help="the region's file")
    add.add_argument("--until", choices=ADD_STEPS, help="stop after this step")
    add.add_argument("--wait-s", type=float, default=WAIT_S)
    remove = actions.add_parser("remove", help="move everything out of a region, then drop it")
    remove.add_argument("name")
    remove.add_argument("--force", action="store_true", help="go on past the safety check")
    remove.add_argument("--check", action="store_true", help="only say what the check finds")
    remove.add_argument("--until", choices=REMOVE_STEPS, help="stop after this step")
    remove.add_argument("--wait-s", type=float, default=WAIT_S)
    status = actions.add_parser("status", help="each region change and its steps")
    status.add_argument("--json", action="store_true")


def run(args: argparse.Namespace, default_topology: Path) -> int:
    return commands.run(args, default_topology)
