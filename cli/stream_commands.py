"""`globelog stream|write|read|segments`: log streams in library mode (ZooKeeper and bookies).

Each command connects as a client of `--region`: the ledger client dials that region's view
of the bookies (remote ones through the WAN) and orders its reads local region first.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any, TextIO

from cli.reach import require_zookeeper
from core.dlsn import DLSN
from core.errors import DataLossError
from core.records import RECORD_BYTES_MAX, Record
from core.streams import StreamSettings
from core.topology import Topology
from ledger import audit_ledgers
from reader.log_reader import LogReader, ReaderConfig
from reader.positions import Position
from region.connections import Session, session
from region.process import event_loop
from writer.admin import apply_retention, delete_stream, describe_segment, describe_stream, truncate
from writer.events import Written
from writer.log_writer import LogWriter, WriterConfig

STDIN_CHUNK_BYTES = 64 * 1024
WRITES_IN_FLIGHT_MAX = 10_000  # lines accepted and not yet printed


# ------------------------------------------------------------------------------ admin


async def stream_admin(s: Session, action: str, name: str | None) -> dict[str, Any] | list[str]:
    if action == "list":
        return await s.streams.list_streams()
    assert name is not None
    if action == "create":
        await s.streams.create_stream(name)
        return {"created": name, "namespace": s.streams.namespace}
    if action == "delete":
        ledgers = await delete_stream(s.streams, s.ledgers, name)
        return {"deleted": name, "namespace": s.streams.namespace, "ledgers_deleted": ledgers}
    return await describe_stream(s.streams, name)


async def stream_truncate(s: Session, name: str, to: DLSN) -> dict[str, Any]:
    result = await truncate(s.streams, name, to)
    return {
        "stream": name,
        "truncated_to": str(to),
        "segments_truncated": list(result.truncated),
        "segment_partially_truncated": result.partial,
        "in_progress_segment_left": result.skipped_in_progress,
    }


async def stream_retention(s: Session, name: str, ttl_s: float, dry_run: bool) -> dict[str, Any]:
    archive = s.topology.archive_uri is not None  # archiving on: only archived segments go
    result = await apply_retention(
        s.streams, s.ledgers, name, ttl_s, dry_run=dry_run, archive_required=archive
    )
    return {
        "stream": name,
        "ttl_s": ttl_s,
        "dry_run": dry_run,
        "archive_required": archive,
        "expired": [describe_segment(seg) for seg in result.expired],
        "segments_kept": result.kept,
        "waiting_for_archive": result.waiting_for_archive,
    }


async def segments_report(s: Session, name: str) -> list[dict[str, Any]]:
    """Every segment with its ledger's ensembles (regions, racks) and their durability audit."""
    await s.streams.require(name)
    segments = [v.segment for v in await s.streams.segments(name)]
    min_regions = s.topology.replication.min_regions_for_durability
    ids = [seg.ledger_id for seg in segments]
    audits, _ = await audit_ledgers(s.store, ids, min_regions) if ids else ([], True)
    by_ledger = {a["ledger_id"]: a for a in audits}
    locations = {b.bookie_id: (b.region, b.rack) for b in s.topology.bookies}
    report = []
    for segment in segments:
        row = describe_segment(segment)
        ledger = by_ledger.get(segment.ledger_id)
        row["ensembles"] = []
        if ledger is not None:
            for ensemble, audit in zip(ledger["ensembles"], ledger["audit"], strict=True):
                row["ensembles"].append(
                    {
                        "first_entry_id": ensemble["first_entry_id"],
                        "bookies": [
                            {"bookie": b, "region": locations.get(b, ("?", "?"))[0],
                             "rack": locations.get(b, ("?", "?"))[1]}
                            for b in ensemble["bookies"]
                        ],
                        "audit": audit["adherence"],
                        "audit_text": audit["text"],
                    }
                )  # fmt: skip
        report.append(row)
    return report


def print_segments(report: list[dict[str, Any]], out: TextIO) -> None:
    for row in report:
        count = "in progress" if row["record_count"] is None else f"{row['record_count']} records"
        last = row["last_dlsn"] or "-"
        print(
            f"segment {row['sequence']:>4}  ledger {row['ledger_id']:<8} {row['state']:<11} "
            f"{row['truncation']:<19} {row['first_dlsn']} .. {last}  {count}  "
            f"seq {row['first_seq']}+  written in {row['writer_region']}",
            file=out,
        )
        for ensemble in row["ensembles"]:
            where = ", ".join(
                f"{b['bookie']} {b['region']}/{b['rack']}" for b in ensemble["bookies"]
            )
            print(
                f"    from entry {ensemble['first_entry_id']}: {where}  [{ensemble['audit']}]",
                file=out,
            )


# ------------------------------------------------------------------------------ write


async def write_stdin(
    s: Session,
    name: str,
    settings: StreamSettings,
    owner: str | None,
    stdin: Any,
    out: TextIO,
    err: TextIO,
) -> int:
    """One record per stdin line; one JSON line per acknowledged record, in order.

    A bad line (empty, or over the record limit) stops the input with an error naming it;
    every line before it is still written and printed. Exit code 0, or 2 after a bad line.
    """
    config = WriterConfig(region=s.region, replication=s.topology.replication, settings=settings)
    if owner:
        config = replace(config, owner=owner)
    writer = await LogWriter.open(s.streams, s.ledgers, name, config)
    printed: asyncio.Queue[asyncio.Future[Written] | None] = asyncio.Queue(WRITES_IN_FLIGHT_MAX)
    printer = asyncio.create_task(_print_acks(printed, out))
    status = 0
    try:
        async for number, line in _stdin_lines(stdin):
            problem = _line_problem(number, line)
            if problem is not None:
                print(f"globelog: error [invalid_record]: {problem}", file=err)
                status = 2
                break
            await writer.wait_for_room()
            await printed.put(writer.write_nowait(Record(line)))
        writer.flush()
        await printed.put(None)
        await printer
        await writer.close()
    except BaseException:
        printer.cancel()
        await writer.abandon()
        raise
    return status


def _line_problem(number: int, line: bytes) -> str | None:
    if not line:
        return f"stdin line {number} is empty; expected one non-empty record per line"
    if len(line) > RECORD_BYTES_MAX:
        return (
            f"stdin line {number} is {len(line)} bytes or more; the record limit is "
            f"{RECORD_BYTES_MAX}"
        )
    return None


async def _print_acks(queue: asyncio.Queue[asyncio.Future[Written] | None], out: TextIO) -> None:
    while (future := await queue.get()) is not None:
        written = await future
        body = {"dlsn": str(written.dlsn), "txid": written.txid, "seq": written.seq}
        out.write(json.dumps(body) + "\n")
        if queue.empty():
            out.flush()
    out.flush()


async def _stdin_lines(stdin: Any) -> AsyncIterator[tuple[int, bytes]]:
    """(line number, line without its newline); a line longer than the record limit is cut
    at the limit + 1 byte, so its check fails without holding it all."""
    pending = b""
    number = 0
    while True:
        chunk: bytes = await asyncio.to_thread(stdin.read1, STDIN_CHUNK_BYTES)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            number += 1
            yield number, line.removesuffix(b"\r")
        if len(pending) > RECORD_BYTES_MAX:
            yield number + 1, pending
            return
    if pending:
        yield number + 1, pending.removesuffix(b"\r")


# ------------------------------------------------------------------------------- read


async def read_records(
    s: Session,
    name: str,
    start: Position,
    follow: bool,
    limit: int | None,
    as_json: bool,
    out: TextIO,
    err: TextIO,
) -> int:
    """Prints records from `start`; 0, or 5 when a lost range was reported on the way."""
    status = 0
    printed = 0
    reader = await LogReader.open(s.streams, s.ledgers, name, start, ReaderConfig(follow=follow))
    async with reader:
        while limit is None or printed < limit:
            try:
                record = await reader.read_next()
            except DataLossError as loss:
                print(f"globelog: error [{loss.code}]: {loss}", file=err)
                status = 5
                continue
            if record is None:
                break
            out.write(_format(record.payload, record.dlsn, record.txid, record.seq, as_json))
            printed += 1
            if reader.buffered == 0:  # flush when caught up, not per record
                out.flush()
    out.flush()
    return status


def _format(payload: bytes, dlsn: DLSN, txid: int, seq: int, as_json: bool) -> str:
    if not as_json:
        return payload.decode(errors="replace") + "\n"
    body: dict[str, Any] = {"dlsn": str(dlsn), "txid": txid, "seq": seq}
    try:
        body["payload"] = payload.decode()
    except UnicodeDecodeError:
        body["payload_b64"] = base64.b64encode(payload).decode()
    return json.dumps(body) + "\n"


def run_in_session(
    topology: Topology,
    region: str,
    namespace: str,
    session_timeout_s: float,
    work: Callable[[Session], Any],
) -> Any:
    async def main() -> Any:
        await require_zookeeper(topology)
        async with session(topology, region, namespace, session_timeout_s) as s:
            return await work(s)

    return event_loop.run(main())
