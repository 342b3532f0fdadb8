"""Batched reads (BATCH_READ_ENTRY) in BookKeeper's v2 binary protocol: messages and codec. Pure.

BookKeeper 4.17 bookies read a run of consecutive entries for one request, but only in the v2
protocol (v3 has the operation number and no message for it). Every v2 number is big-endian:

    request:  header u32 | ledger id i64 | first entry id i64 | request id i64 | max count i32
              | max size i64                                    (40 bytes; no fencing here)
    response: header u32 | status i32 | ledger id i64 | first entry id i64 | request id i64
              | (entry length i32 | entry packet) repeated to the end of the frame

The header packs the protocol version (bits 31..24, 2), the opcode (23..16, 7 for a batch
read) and flags (15..0). The response echoes the ledger, first entry and request id; its
entries are consecutive from the first. A bookie stops early, with EOK and the entries read so
far, at the first entry it lacks or when the next would pass `max_size` (counted over the
whole frame, length prefix included); it always sends the first entry, and an error only when
it cannot read that one. Each entry packet is the stored entry, digest header included, as in
a v3 ReadResponse body.

A bookie decides on a connection's first frame whether it speaks v2 or v3 and never goes back,
so batched reads travel on connections of their own. The same 4-byte length prefix frames
both protocols (`ledger.codecs.frames`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from ledger.codecs.frames import FRAME_BYTES_MAX, LENGTH_PREFIX_BYTES, Deframer
from ledger.codes import OperationType, StatusCode
from ledger.errors import FrameTooLargeError, ProtocolError

V2_VERSION = 2
V2_BATCH_READ_OPCODE = 7
# A bookie caps a batch's bytes at its maxBatchReadSize, 5 MiB by default.
BOOKIE_BATCH_BYTES_MAX = 5 * 1024 * 1024
_REQUEST = struct.Struct(">Iqqqiq")
_RESPONSE_HEAD = struct.Struct(">Iiqqq")
_ENTRY_LENGTH = struct.Struct(">i")
_I64_MAX = (1 << 63) - 1
_I32_MAX = (1 << 31) - 1

# v2 status codes (BookieProtocol) and the v3 StatusCode each one means.
V2_STATUS: dict[int, StatusCode] = {
    0: StatusCode.EOK,
    1: StatusCode.ENOLEDGER,
    2: StatusCode.ENOENTRY,
    100: StatusCode.EBADREQ,
    101: StatusCode.EIO,
    102: StatusCode.EUA,
    103: StatusCode.EBADVERSION,
    104: StatusCode.EFENCED,
    105: StatusCode.EREADONLY,
    106: StatusCode.ETOOMANYREQUESTS,
    107: StatusCode.EUNKNOWNLEDGERSTATE,
}
_V2_CODE = {status: code for code, status in V2_STATUS.items()}


@dataclass(frozen=True, slots=True)
class BatchReadRequest:
    """Up to `max_count` consecutive entries from `first_entry_id`, at most `max_size` bytes
    of frame; `txn_id` is the v2 request id the bookie echoes."""

    operation: ClassVar[OperationType] = OperationType.BATCH_READ_ENTRY
    txn_id: int
    ledger_id: int
    first_entry_id: int
    max_count: int
    max_size: int

    def __post_init__(self) -> None:
        assert 0 <= self.txn_id <= _I64_MAX, self.txn_id
        assert 0 <= self.ledger_id <= _I64_MAX, self.ledger_id
        assert 0 <= self.first_entry_id <= _I64_MAX, self.first_entry_id
        assert 0 < self.max_count <= _I32_MAX, self.max_count
        assert 0 < self.max_size <= _I64_MAX, self.max_size


@dataclass(frozen=True, slots=True)
class BatchReadResponse:
    """The entry packets of `first_entry_id`, `first_entry_id + 1`, ... (none unless EOK)."""

    operation: ClassVar[OperationType] = OperationType.BATCH_READ_ENTRY
    txn_id: int
    status: StatusCode
    ledger_id: int
    first_entry_id: int
    entries: tuple[bytes, ...]


def encode_batch_read(request: BatchReadRequest, frame_bytes_max: int = FRAME_BYTES_MAX) -> bytes:
    """The whole frame (length prefix and v2 request) of a batched read."""
    size = LENGTH_PREFIX_BYTES + _REQUEST.size
    if size > frame_bytes_max:
        raise FrameTooLargeError(f"frame is {size} bytes; the limit is {frame_bytes_max}")
    header = V2_VERSION << 24 | V2_BATCH_READ_OPCODE << 16
    body = _REQUEST.pack(
        header,
        request.ledger_id,
        request.first_entry_id,
        request.txn_id,
        request.max_count,
        request.max_size,
    )
    return _REQUEST.size.to_bytes(LENGTH_PREFIX_BYTES, "big") + body


def decode_batch_read_request(message: memoryview | bytes) -> BatchReadRequest:
    """A v2 batch read request (the frame without its length prefix), as a bookie reads it;
    ProtocolError if it is not one (for fake bookies and tests)."""
    if len(message) != _REQUEST.size:
        raise ProtocolError(f"batch read request of {len(message)} bytes: expected {_REQUEST.size}")
    header, ledger_id, first_entry_id, request_id, max_count, max_size = _REQUEST.unpack(message)
    version, opcode = header >> 24, header >> 16 & 0xFF
    if version != V2_VERSION or opcode != V2_BATCH_READ_OPCODE:
        raise ProtocolError(
            f"request header {header:#010x}: expected protocol version {V2_VERSION} and "
            f"opcode {V2_BATCH_READ_OPCODE} (batch read), got version {version} opcode {opcode}"
        )
    return BatchReadRequest(request_id, ledger_id, first_entry_id, max_count, max_size)


def decode_batch_read_response(message: memoryview | bytes) -> BatchReadResponse:
    """A v2 batch read response (the frame without its length prefix); ProtocolError if not."""
    if len(message) < _RESPONSE_HEAD.size:
        raise ProtocolError(
            f"batch read response of {len(message)} bytes: expected at least {_RESPONSE_HEAD.size}"
        )
    header, code, ledger_id, first_entry_id, request_id = _RESPONSE_HEAD.unpack_from(message)
    version, opcode = header >> 24, header >> 16 & 0xFF
    if version != V2_VERSION or opcode != V2_BATCH_READ_OPCODE:
        raise ProtocolError(
            f"response header {header:#010x}: expected protocol version {V2_VERSION} and "
            f"opcode {V2_BATCH_READ_OPCODE} (batch read), got version {version} opcode {opcode}"
        )
    status = V2_STATUS.get(code)
    if status is None:
        raise ProtocolError(
            f"batch read response for request {request_id}: unknown status code {code} "
            f"(expected one of {sorted(V2_STATUS)})"
        )
    if ledger_id < 0 or first_entry_id < 0 or request_id < 0:
        raise ProtocolError(
            f"batch read response: negative ledger {ledger_id}, entry {first_entry_id} or "
            f"request id {request_id}"
        )
    entries = _entries(message, _RESPONSE_HEAD.size, request_id)
    if entries and status is not StatusCode.EOK:
        raise ProtocolError(
            f"batch read response for request {request_id}: {status.name} with "
            f"{len(entries)} entries (expected none)"
        )
    return BatchReadResponse(request_id, status, ledger_id, first_entry_id, entries)


def _entries(message: memoryview | bytes, offset: int, request_id: int) -> tuple[bytes, ...]:
    entries: list[bytes] = []
    end = len(message)
    while offset < end:
        if end - offset < _ENTRY_LENGTH.size:
            raise ProtocolError(
                f"batch read response for request {request_id}: {end - offset} bytes after "
                f"entry {len(entries)}, too few for an entry length"
            )
        (length,) = _ENTRY_LENGTH.unpack_from(message, offset)
        offset += _ENTRY_LENGTH.size
        if length < 0 or length > end - offset:
            raise ProtocolError(
                f"batch read response for request {request_id}: entry {len(entries)} announces "
                f"{length} bytes; {end - offset} remain in the frame"
            )
        entries.append(bytes(message[offset : offset + length]))
        offset += length
    return tuple(entries)


def encode_batch_read_response(
    response: BatchReadResponse, frame_bytes_max: int = FRAME_BYTES_MAX
) -> bytes:
    """The whole frame a bookie sends for `response` (for fakes and tests)."""
    header = V2_VERSION << 24 | V2_BATCH_READ_OPCODE << 16
    head = _RESPONSE_HEAD.pack(
        header,
        _V2_CODE[response.status],
        response.ledger_id,
        response.first_entry_id,
        response.txn_id,
    )
    pieces = [head]
    for entry in response.entries:
        pieces += (_ENTRY_LENGTH.pack(len(entry)), entry)
    message = b"".join(pieces)
    size = LENGTH_PREFIX_BYTES + len(message)
    if size > frame_bytes_max:
        raise FrameTooLargeError(f"frame is {size} bytes; the limit is {frame_bytes_max}")
    return len(message).to_bytes(LENGTH_PREFIX_BYTES, "big") + message


class BatchReadDecoder(Deframer[BatchReadResponse]):
    """Bookie → client on a batched-read connection: bytes in, BatchReadResponses out."""

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX) -> None:
        super().__init__(decode_batch_read_response, "batch read response stream", frame_bytes_max)
