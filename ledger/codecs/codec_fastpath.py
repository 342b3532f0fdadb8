"""Fast paths for the hot v3 messages: AddRequest and ReadRequest out, AddResponse and
ReadResponse in. ledger.codecs.message_codec's generic path (Writer / parse / Fields) stays the
reference: the fast paths must give exactly its bytes and objects (tests/unit/ledger/
test_codec_fastpath.py checks that on generated and mutated messages).

Why: the generic path builds a Writer per message and a Fields object and a dict per
(sub)message, and spends most of its time on that bookkeeping, not on bytes. A client sends an
AddRequest or ReadRequest and decodes the response for every entry, so these four messages get
straight-line code with precomputed tag bytes.

Encoding writes fields in field-number order, optional ones only when set, as the generic path
(and protobuf-java) does.

Decoding is a single forward pass that accepts only the canonical layout protobuf-java writes
for these responses: each field once, in field-number order, with its canonical tag, nothing
unknown, and every value one the generic path accepts. For anything else it returns None, and
the caller runs the generic parser, which then also produces every error and error message. So
on any input the fast path either agrees with the generic path or steps aside; it never raises.
"""

from __future__ import annotations

from ledger.codecs.messages import AddRequest, AddResponse, ReadRequest, ReadResponse, Response
from ledger.codecs.protobuf import MESSAGE_BYTES_MAX, VARINT_BYTES_MAX
from ledger.codes import OperationType, ProtocolVersion, StatusCode

_U64 = (1 << 64) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_SIGN_BIT = 1 << 63

# The varints of 0..127: one byte each, and what most tags, flags and lengths encode to.
_ONE_BYTE = tuple(bytes((value,)) for value in range(0x80))
# -1 as an int64 (ten bytes): LAST_ADD_CONFIRMED and INVALID_ENTRY_ID, common in reads.
_MINUS_ONE = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"

# Tags (field << 3 | wire type) as the bytes written for them.
_HEADER_TAG = b"\x0a"  # Request/Response.header (1), bytes
_ADD_BODY_TAG = b"\xaa\x06"  # Request.addRequest (101), bytes
_READ_BODY_TAG = b"\xa2\x06"  # Request.readRequest (100), bytes
_RECOVERY_ADD_FLAG = b"\xa0\x06\x01"  # AddRequest.flag (100) = RECOVERY_ADD
_FLAG_TAG = b"\xa0\x06"  # ReadRequest.flag (100), varint


def _header_starts(operation: OperationType) -> tuple[bytes, ...]:
    """Request.header's bytes up to txnId's value, by the length of txnId's varint: tag (1),
    length, then BKPacketHeader {version (1) VERSION_THREE, operation (2), tag of txnId (3)}."""
    fields = bytes((0x08, ProtocolVersion.VERSION_THREE, 0x10, operation, 0x18))
    return tuple(
        _HEADER_TAG + _ONE_BYTE[len(fields) + txn_bytes] + fields
        for txn_bytes in range(VARINT_BYTES_MAX + 1)
    )


_ADD_HEADER_STARTS = _header_starts(OperationType.ADD_ENTRY)
_READ_HEADER_STARTS = _header_starts(OperationType.READ_ENTRY)

# Statuses by their wire value; a value absent here (unknown, or negative / over 32 bits and
# so reduced by int32 in the generic path) is left to the generic path.
_STATUSES = {int(status): status for status in StatusCode}
# Enum members as plain globals: looking one up on its class costs ~0.1 µs in Python 3.11.
_EOK = StatusCode.EOK
_VERSION_THREE = int(ProtocolVersion.VERSION_THREE)
_ADD_ENTRY = int(OperationType.ADD_ENTRY)
_READ_ENTRY = int(OperationType.READ_ENTRY)


def uvarint(value: int) -> bytes:
    """The varint of an unsigned 64-bit value (protobuf.encode_varint, unrolled to 4 bytes)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    assert 0 <= value <= _U64, f"varint value out of range: {value}"
    if value < 0x4000:
        return (value & 0x7F | 0x80 | (value >> 7) << 8).to_bytes(2, "little")
    if value < 0x200000:
        return (
            value & 0x7F | 0x80 | ((value >> 7) & 0x7F | 0x80) << 8 | (value >> 14) << 16
        ).to_bytes(3, "little")
    if value < 0x10000000:
        return (
            value & 0x7F
            | 0x80
            | ((value >> 7) & 0x7F | 0x80) << 8
            | ((value >> 14) & 0x7F | 0x80) << 16
            | (value >> 21) << 24
        ).to_bytes(4, "little")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def int64(value: int) -> bytes:
    """The varint of an int64 (negative values take 10 bytes, as protobuf-java writes them)."""
    if value >= 0:
        assert value <= _INT64_MAX, f"int64 out of range: {value}"
        return uvarint(value)
    if value == -1:
        return _MINUS_ONE
    assert value >= _INT64_MIN, f"int64 out of range: {value}"
    return uvarint(value & _U64)


def _header(starts: tuple[bytes, ...], txn_id: int, priority: int) -> bytes:
    """Request.header, tag and length included (at most 27 bytes: a 1-byte length)."""
    txn = uvarint(txn_id)
    if not priority:
        return starts[len(txn)] + txn
    # Rarely set, so not precomputed: the fields before txnId (after tag and length), and on.
    fields = starts[len(txn)][2:] + txn + b"\x20" + uvarint(priority)
    return _HEADER_TAG + _ONE_BYTE[len(fields)] + fields


def add_request_pieces(request: AddRequest) -> tuple[bytes, bytes, bytes]:
    """The Request message of `request` as (head, entry body, tail), to be joined in that order;
    the entry body is passed through uncopied."""
    key, body = request.master_key, request.body
    fields = b"".join(
        (
            b"\x08",
            int64(request.ledger_id),
            b"\x10",
            int64(request.entry_id),
            b"\x1a",
            uvarint(len(key)),
            key,
            b"\x22",
            uvarint(len(body)),
        )
    )
    tail = b""
    if request.write_flags is not None:
        tail = b"\x28" + int64(request.write_flags)
    if request.recovery:
        tail += _RECOVERY_ADD_FLAG
    head = b"".join(
        (
            _header(_ADD_HEADER_STARTS, request.txn_id, request.priority),
            _ADD_BODY_TAG,
            uvarint(len(fields) + len(body) + len(tail)),
            fields,
        )
    )
    return head, body, tail


class AddFrames:
    """The frames of one entry's AddRequest for any txn id, all but the header built once: the
    requests of an entry to its write quorum differ only in BKPacketHeader.txnId.

    `pieces(txn_id)` gives (length prefix + header + add fields, entry body, tail), the same
    bytes as `ledger.codecs.frames.encode_request` of the AddRequest; the entry body is not copied.
    """

    __slots__ = ("_body", "_priority", "_rest_bytes", "_rest_head", "_tail")

    def __init__(self, request: AddRequest) -> None:
        head, body, tail = add_request_pieces(request)
        header = _header(_ADD_HEADER_STARTS, request.txn_id, request.priority)
        self._rest_head = head[len(header) :]  # Request.addRequest's tag, length and fields
        self._body = body
        self._tail = tail
        self._priority = request.priority
        self._rest_bytes = len(self._rest_head) + len(body) + len(tail)

    def pieces(self, txn_id: int) -> tuple[bytes, bytes, bytes]:
        header = _header(_ADD_HEADER_STARTS, txn_id, self._priority)
        length = len(header) + self._rest_bytes
        return (length.to_bytes(4, "big") + header + self._rest_head, self._body, self._tail)


def read_request_message(request: ReadRequest) -> bytes:
    """The Request message of `request` (the caller has checked the flag combination)."""
    fields = b"\x08" + int64(request.ledger_id) + b"\x10" + int64(request.entry_id)
    if request.master_key is not None:
        fields += b"\x1a" + uvarint(len(request.master_key)) + request.master_key
    if request.previous_lac is not None:
        fields += b"\x20" + int64(request.previous_lac)
    if request.timeout_ms is not None:
        fields += b"\x28" + int64(request.timeout_ms)
    if request.flag is not None:
        fields += _FLAG_TAG + uvarint(request.flag)
    return b"".join(
        (
            _header(_READ_HEADER_STARTS, request.txn_id, request.priority),
            _READ_BODY_TAG,
            uvarint(len(fields)),
            fields,
        )
    )


# ------------------------------------------------------------------------------- decoding


class _NotCanonicalError(Exception):
    """Internal: the input is not in the layout the fast path reads; use the generic path.

    Always raised as a fresh instance: re-raising one instance would chain every traceback.
    """


def _varint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the varint at `pos`, which must end before `end`.

    The generic decode_varint's semantics (bits beyond 64 dropped); where it would raise
    (truncated, or longer than 10 bytes), this raises _NotCanonicalError. Unrolled up to 4 bytes
    (values below 2**28): statuses, lengths, and most ids and txn ids.
    """
    if pos < end:
        byte = buf[pos]
        if byte < 0x80:
            return byte, pos + 1
        if pos + 4 <= end:
            value = byte & 0x7F
            byte = buf[pos + 1]
            if byte < 0x80:
                return value | byte << 7, pos + 2
            value |= (byte & 0x7F) << 7
            byte = buf[pos + 2]
            if byte < 0x80:
                return value | byte << 14, pos + 3
            value |= (byte & 0x7F) << 14
            byte = buf[pos + 3]
            if byte < 0x80:
                return value | byte << 21, pos + 4
    return _long_varint(buf, pos, end)


def _long_varint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    limit = min(end, pos + VARINT_BYTES_MAX)
    while pos < limit:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & _U64, pos
        shift += 7
    raise _NotCanonicalError


def _field(buf: bytes | memoryview, pos: int, end: int, tag: int) -> tuple[int, int]:
    """The varint of the one-byte tag `tag` that must be at `pos`."""
    if pos >= end or buf[pos] != tag:
        raise _NotCanonicalError
    return _varint(buf, pos + 1, end)


def _int64(raw: int) -> int:
    return raw - (1 << 64) if raw & _SIGN_BIT else raw


def _status(raw: int) -> StatusCode:
    status = _STATUSES.get(raw)
    if status is None:
        raise _NotCanonicalError
    return status


def decode_response(data: bytes | memoryview) -> Response | None:
    """The AddResponse or ReadResponse in a Response message in canonical layout, else None."""
    if len(data) > MESSAGE_BYTES_MAX:
        return None  # the generic path reports the size
    try:
        return _decode_response(data)
    except _NotCanonicalError:
        return None


def _decode_response(buf: bytes | memoryview) -> Response:
    end = len(buf)
    # header: 0a len {08 03 10 op 18 txnId [20 priority]}; a 1-byte length, at least 6 bytes.
    if end < 8 or buf[0] != 0x0A or not 6 <= buf[1] < 0x80:
        raise _NotCanonicalError
    header_end = 2 + buf[1]
    if header_end > end or buf[2] != 0x08 or buf[3] != _VERSION_THREE:
        raise _NotCanonicalError
    if buf[4] != 0x10 or buf[6] != 0x18:
        raise _NotCanonicalError
    op = buf[5]
    txn_id, pos = _varint(buf, 7, header_end)
    if pos < header_end and buf[pos] == 0x20:
        _, pos = _varint(buf, pos + 1, header_end)  # priority: responses ignore it
    if pos != header_end:
        raise _NotCanonicalError
    raw, pos = _field(buf, pos, end, 0x10)  # status (2)
    top_status = _status(raw)
    # the body (field 100 or 101) runs to the end of the message
    if op == _ADD_ENTRY:
        tag = 0xAA
    elif op == _READ_ENTRY:
        tag = 0xA2
    else:
        raise _NotCanonicalError
    if pos + 2 > end or buf[pos] != tag or buf[pos + 1] != 0x06:
        raise _NotCanonicalError
    size, pos = _varint(buf, pos + 2, end)
    if pos + size != end:
        raise _NotCanonicalError
    raw, pos = _field(buf, pos, end, 0x08)  # the body's status (1)
    inner_status = _status(raw)  # checked even when the top-level status overrides it
    status = inner_status if top_status is _EOK else top_status
    ledger_id, pos = _field(buf, pos, end, 0x10)
    entry_id, pos = _field(buf, pos, end, 0x18)
    if tag == 0xAA:
        if pos != end:
            raise _NotCanonicalError
        return AddResponse(txn_id, status, _int64(ledger_id), _int64(entry_id))
    return _read_response_rest(buf, pos, end, txn_id, status, _int64(ledger_id), _int64(entry_id))


def _read_response_rest(
    buf: bytes | memoryview,
    pos: int,
    end: int,
    txn_id: int,
    status: StatusCode,
    ledger_id: int,
    entry_id: int,
) -> ReadResponse:
    """ReadResponse's optional fields: body (4), maxLAC (5), lacUpdateTimestamp (6)."""
    body = max_lac = timestamp = None
    if pos < end and buf[pos] == 0x22:
        size, pos = _varint(buf, pos + 1, end)
        if pos + size > end:
            raise _NotCanonicalError
        body = bytes(buf[pos : pos + size])
        pos += size
    if pos < end and buf[pos] == 0x28:
        raw, pos = _varint(buf, pos + 1, end)
        max_lac = _int64(raw)
    if pos < end and buf[pos] == 0x30:
        raw, pos = _varint(buf, pos + 1, end)
        timestamp = _int64(raw)
    if pos != end:
        raise _NotCanonicalError
    return ReadResponse(txn_id, status, ledger_id, entry_id, body, max_lac, timestamp)
