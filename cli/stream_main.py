"""Dispatches `globelog stream|write|read|segments` to cli.stream_commands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli import proxy_commands, stream_args
from cli.stream_commands import (
    print_segments,
    read_records,
    run_in_session,
    segments_report,
    stream_admin,
    stream_retention,
    stream_truncate,
    write_stdin,
)
from cli.topology import default_topology_path
from core.dlsn import DLSN
from core.errors import ConfigError
from placement import load_checked_topology
from region.client import ProxyClient
from region.connections import Session
from region.drain import drain_targets, set_drained
from region.process import event_loop


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=1, sort_keys=True))


def run_stream_command(args: argparse.Namespace) -> int:
    topology = load_checked_topology(args.topology or default_topology_path())
    region = args.region or topology.region_names[0]
    command = args.command
    # Every flag is checked before anything connects: bad input changes nothing.
    to = DLSN.parse(args.to) if command == "stream" and args.action == "truncate" else None
    ttl_s = (
        stream_args.duration_s(args.ttl)
        if command == "stream" and args.action == "retention"
        else 0.0
    )
    position = stream_args.read_position(args) if command == "read" else None
    settings = stream_args.writer_settings(args, topology.streams) if command == "write" else None
    if command == "read" and args.limit is not None and args.limit < 0:
        raise ConfigError(f"--limit {args.limit}: expected >= 0")
    if not 0.4 <= args.zk_session_timeout_s <= 60:
        raise ConfigError(f"--zk-session-timeout-s {args.zk_session_timeout_s}: expected 0.4..60")

    if not args.direct:
        proxied = _via_proxies(args, topology, region, settings, position)
        if proxied is not None:
            return proxied

    async def work(s: Session) -> int:
        if command == "stream":
            if args.action == "truncate":
                assert to is not None
                _print_json(await stream_truncate(s, args.name, to))
            elif args.action == "retention":
                _print_json(await stream_retention(s, args.name, ttl_s, args.dry_run))
            elif args.action == "list":
                for name in await stream_admin(s, "list", None):
                    print(name)
            elif args.action == "drain":
                await s.streams.require(args.name)
                if not args.undo and not args.force and not await drain_targets(s.store, region):
                    print(
                        f"globelog: draining {args.name} in {region} refused: no other region "
                        "has a write proxy to take it (start one; --force drains regardless)",
                        file=sys.stderr,
                    )
                    return 2
                changed = await set_drained(
                    s.store, region, args.namespace, args.name, not args.undo
                )
                state = "undrained" if args.undo else "drained"
                _print_json({state: args.name, "region": region, "changed": changed})
            else:
                _print_json(await stream_admin(s, args.action, args.name))
            return 0
        if command == "write":
            assert settings is not None
            return await write_stdin(
                s, args.name, settings, args.owner, sys.stdin.buffer, sys.stdout, sys.stderr
            )
        if command == "read":
            assert position is not None
            return await read_records(
                s, args.name, position, args.follow, args.limit, args.json, sys.stdout, sys.stderr
            )
        report = await segments_report(s, args.name)
        if args.json:
            _print_json(report)
        else:
            print_segments(report, sys.stdout)
        return 0

    status: int = run_in_session(topology, region, args.namespace, args.zk_session_timeout_s, work)
    return status


PROXIED_ACTIONS = {"create", "delete", "list", "describe", "truncate"}
WRITER_FLAGS = (
    "transmit",
    "buffer_bytes",
    "flush_sla_ms",
    "segment_roll_bytes",
    "segment_roll_s",
    "compression",
    "lock_timeout_s",
)


def _via_proxies(
    args: argparse.Namespace,
    topology: Any,
    region: str,
    settings: Any,
    position: Any,
) -> int | None:
    """Runs the command through the region's proxies when they answer: its exit status, or
    None when it is for library mode (no proxy running, or a command they do not serve)."""
    command = args.command
    proxied = command in ("write", "read") or (
        command == "stream" and args.action in PROXIED_ACTIONS
    )
    # Writer settings (other than --batch) are the library writer's; a proxy has its own.
    tuned = command == "write" and any(getattr(args, flag) is not None for flag in WRITER_FLAGS)
    if not proxied or tuned or (command == "write" and args.owner):
        return None
    write_url, read_url = proxy_commands.proxy_urls(topology, region)
    url = read_url if command == "read" else write_url

    async def main() -> int | None:
        if not await proxy_commands.answers(url):
            return None
        assert url is not None
        if command == "read":
            return await proxy_commands.read_pages(
                url, args.namespace, args.name, position, args.follow, args.limit, args.json,
                sys.stdout,
            )  # fmt: skip
        async with ProxyClient([url], namespace=args.namespace) as client:
            if command == "write":
                return await proxy_commands.write_lines(
                    client, args.name, args.batch, sys.stdin.buffer, sys.stdout, sys.stderr
                )
            if args.action == "truncate":
                _print_json(await client.truncate(args.name, DLSN.parse(args.to)))
            elif args.action == "list":
                for name in await client.list_streams():
                    print(name)
            else:
                _print_json(await proxy_commands.stream_action(client, args.action, args.name))
            return 0

    result: int | None = event_loop.run(main())
    return result
