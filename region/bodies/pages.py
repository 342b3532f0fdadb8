"""A read page's body: each record as JSON (its payload as text, or in base64 when it is not
UTF-8), joined into a page without encoding the whole page again, and cut into slices the
read proxy encodes one turn of its event loop at a time."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

from core.records import LogRecord

# A page or a tail's batch is encoded (JSON, base64) on the event loop a slice at a time
# (a tail sends each slice as it is made), the other clients' requests served between: a slice is at most ENCODE_SLICE_RECORDS
# records and ENCODE_SLICE_BYTES of payloads (at least one record), a millisecond or two of
# encoding. (Encoding a large page in a thread was worse: the thread held the interpreter in
# long C calls, and the loop waited a switch interval, 5 ms, each time it took it back: every
# step of every other request, a read through the read proxy at 6x its quiet p99.)
ENCODE_SLICE_RECORDS = 500
ENCODE_SLICE_BYTES = 256 * 1024


def within_page_bytes(records: list[LogRecord], most: int) -> list[LogRecord]:
    """The records from the first while their payloads fit in `most` bytes (at least one)."""
    size = 0
    for count, record in enumerate(records):
        size += len(record.payload)
        if size > most and count > 0:
            return records[:count]
    return records


def encode_slices(records: list[LogRecord]) -> Iterator[list[LogRecord]]:
    """`records` in runs of at most ENCODE_SLICE_RECORDS records and ENCODE_SLICE_BYTES of
    payloads, each at least one record."""
    first = size = 0
    for index, record in enumerate(records):
        if index > first and (
            index - first == ENCODE_SLICE_RECORDS or size + len(record.payload) > ENCODE_SLICE_BYTES
        ):
            yield records[first:index]
            first, size = index, 0
        size += len(record.payload)
    if first < len(records):
        yield records[first:]


def encoded_page(records: list[LogRecord], next_seq: int) -> bytes:
    return b"".join(page_pieces([record_json(r) for r in records], next_seq))


def page_pieces(encodings: list[bytes], next_seq: int | None) -> list[bytes]:
    """A page's body as the pieces it is sent in, in turn: joined, what json.dumps makes of
    the whole page (`next_seq` None: a stream with nothing to read from the position asked).
    The records' encodings are not copied into one body: a wide page joined whole was a
    copy of megabytes in one step of the loop, per request, of encodings the read-ahead
    already holds."""
    pieces = [b'{"records": [']
    for index, encoding in enumerate(encodings):
        if index:
            pieces.append(b", ")
        pieces.append(encoding)
    pieces.append(b'], "next_seq": ' + (b"null" if next_seq is None else b"%d" % next_seq) + b"}")
    return pieces


def record_json(record: LogRecord) -> bytes:
    """What json.dumps makes of `record_body(record)`, the payload, its last key, added as it is
    when base64 (nothing in base64 needs escaping: no pass of the JSON encoder over it)."""
    head = json.dumps(_metadata(record))[:-1].encode()
    try:
        text = record.payload.decode()
    except UnicodeDecodeError:
        return b"".join((head, b', "payload_b64": "', base64.b64encode(record.payload), b'"}'))
    return b"".join((head, b', "payload": ', json.dumps(text).encode(), b"}"))


def record_body(record: LogRecord) -> dict[str, Any]:
    body = _metadata(record)
    try:
        body["payload"] = record.payload.decode()
    except UnicodeDecodeError:
        body["payload_b64"] = base64.b64encode(record.payload).decode()
    return body


def _metadata(record: LogRecord) -> dict[str, Any]:
    body: dict[str, Any] = {
        "dlsn": str(record.dlsn),
        "txid": record.txid,
        "seq": record.seq,
        "write_time_ms": record.write_time_ms,
        "region": record.writer_region,
    }
    if record.producer_id is not None:
        body["producer_id"], body["producer_seq"] = record.producer_id, record.producer_seq
    return body
