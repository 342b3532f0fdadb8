"""Flags of `globelog stream|write|read|segments`, and turning them into settings and positions."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from datetime import UTC, datetime
from typing import Any

from core.dlsn import DLSN
from core.errors import ConfigError
from core.streams import DEFAULT_NAMESPACE, StreamSettings, TransmitPolicy
from reader.positions import By, Position

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration_s(text: str) -> float:
    """`7d`, `12h`, `30m`, `45s`, `500ms` (or a bare number of seconds) in seconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is not None:
        return float(match.group(1)) * _UNIT_S[match.group(2)]
    try:
        return float(text)
    except ValueError:
        raise ConfigError(
            f"duration {text!r}: expected a number with a unit (500ms, 45s, 30m, 12h, 7d, 2w)"
        ) from None


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology", default=os.environ.get("GLOBELOG_TOPOLOGY"))
    parser.add_argument("--namespace", default=DEFAULT_NAMESPACE)
    parser.add_argument(
        "--region", default=os.environ.get("GLOBELOG_REGION"), help="default: the first region"
    )
    parser.add_argument(
        "--direct",
        action="store_true",
        help="library mode: talk to ZooKeeper and the bookies, not to the region's proxies",
    )
    parser.add_argument(
        "--zk-session-timeout-s",
        type=float,
        default=10.0,
        help="ZooKeeper session timeout: how soon a dead writer's ownership lock goes",
    )


def add_stream_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    stream = commands.add_parser("stream", help="create, delete, list, describe, truncate streams")
    stream_sub = stream.add_subparsers(dest="action", required=True)
    for action, text in (
        ("create", "create a stream"),
        ("delete", "delete a stream and its ledgers (refused while a writer owns it)"),
        ("describe", "a stream's owner, segments and counters"),
    ):
        sub = stream_sub.add_parser(action, help=text)
        sub.add_argument("name")
        add_common(sub)
    add_common(stream_sub.add_parser("list", help="the streams of a namespace"))
    drain = stream_sub.add_parser(
        "drain", help="stop --region's write proxies taking the stream's writes (--undo ends it)"
    )
    drain.add_argument("name")
    drain.add_argument("--undo", action="store_true")
    drain.add_argument("--force", action="store_true", help="even with nowhere for it to go")
    add_common(drain)
    trunc = stream_sub.add_parser("truncate", help="mark every record before a DLSN truncated")
    trunc.add_argument("name")
    trunc.add_argument("--to", required=True, metavar="DLSN")
    add_common(trunc)
    ret = stream_sub.add_parser("retention", help="delete segments completed before a TTL")
    ret.add_argument("name")
    ret.add_argument("--ttl", required=True, help="e.g. 7d, 12h, 30m")
    ret.add_argument("--dry-run", action="store_true")
    add_common(ret)

    write = commands.add_parser("write", help="append one record per stdin line")
    write.add_argument("name", metavar="STREAM")
    add_common(write)
    write.add_argument("--batch", action="store_true", help="buffer records into larger entries")
    write.add_argument("--owner", default=None, help="the owner name recorded in the lock")
    write.add_argument("--transmit", choices=[t.value for t in TransmitPolicy])
    write.add_argument("--buffer-bytes", type=int)
    write.add_argument("--flush-sla-ms", type=float)
    write.add_argument("--segment-roll-bytes", type=int)
    write.add_argument("--segment-roll-s", type=float)
    write.add_argument("--compression", choices=["none", "lz4", "zstd"])
    write.add_argument("--lock-timeout-s", type=float)

    read = commands.add_parser("read", help="print a stream's records")
    read.add_argument("name", metavar="STREAM")
    add_common(read)
    start = read.add_mutually_exclusive_group()
    start.add_argument("--from-start", action="store_true", help="the first readable record")
    start.add_argument("--from-dlsn", metavar="D")
    start.add_argument("--from-txid", type=int, metavar="T")
    start.add_argument("--from-seq", type=int, metavar="N")
    start.add_argument("--from-time", metavar="ISO", help="ISO 8601; no zone means UTC")
    read.add_argument("--follow", action="store_true", help="keep tailing after the end")
    read.add_argument("--limit", type=int)
    read.add_argument("--json", action="store_true")

    segments = commands.add_parser("segments", help="a stream's segments, ensembles and audit")
    segments.add_argument("name", metavar="STREAM")
    add_common(segments)
    segments.add_argument("--json", action="store_true")


def writer_settings(args: argparse.Namespace, defaults: StreamSettings) -> StreamSettings:
    """The topology's `streams:` defaults with the write command's flags over them."""
    changes: dict[str, Any] = {}
    transmit = args.transmit or ("size" if args.batch else "immediate")
    changes["transmit"] = TransmitPolicy(transmit)
    for flag, field, low in (
        ("buffer_bytes", "buffer_bytes", 0),
        ("segment_roll_bytes", "segment_roll_bytes", 1),
        ("segment_roll_s", "segment_roll_s", 0.001),
        ("lock_timeout_s", "lock_timeout_s", 0),
    ):
        value = getattr(args, flag)
        if value is not None:
            if value < low:
                raise ConfigError(f"--{flag.replace('_', '-')} {value}: expected >= {low}")
            changes[field] = value
    if args.flush_sla_ms is not None:
        if args.flush_sla_ms <= 0:
            raise ConfigError(f"--flush-sla-ms {args.flush_sla_ms}: expected > 0")
        changes["flush_sla_s"] = args.flush_sla_ms / 1000
    if args.compression is not None:
        changes["compression"] = args.compression
    return dataclasses.replace(defaults, **changes)


def read_position(args: argparse.Namespace) -> Position:
    if args.from_dlsn is not None:
        return Position(By.DLSN, DLSN.parse(args.from_dlsn))
    if args.from_txid is not None:
        return Position(By.TXID, args.from_txid)
    if args.from_seq is not None:
        return Position(By.SEQ, args.from_seq)
    if args.from_time is not None:
        try:
            moment = datetime.fromisoformat(args.from_time)
        except ValueError:
            raise ConfigError(
                f"--from-time {args.from_time!r}: expected ISO 8601, e.g. 2026-11-22T10:00:00Z"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return Position(By.TIME, max(0, int(moment.timestamp() * 1000)))
    return Position.earliest()
