"""Typed v3 bookie requests and responses, and the Request / Response envelope around them.

Field numbers are those of BookkeeperProtocol.proto. Fields are written in field-number order,
optional ones only when set, so the bytes equal protobuf-java's for the same message. Each
operation's body is encoded in ledger.codecs.message_codec; framing (the 4-byte length prefix) is in
ledger.codecs.frames.

A response's `status` is the effective one, as BookKeeper's client computes it: the top-level
Response.status when it is not EOK, else the status inside the operation's response.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ledger.codecs.protobuf import Fields, Writer
from ledger.codes import BookieInfoFlag, OperationType, ProtocolVersion, ReadFlag, StatusCode
from ledger.errors import BookieError, ProtocolError, status_error

# Request / Response field numbers (BookkeeperProtocol.proto).
HEADER_FIELD = 1
STATUS_FIELD = 2  # Response only
# Operation → the field holding its request and response body (the same number in both).
BODY_FIELDS: dict[OperationType, int] = {
    OperationType.READ_ENTRY: 100,
    OperationType.ADD_ENTRY: 101,
    OperationType.AUTH: 102,
    OperationType.WRITE_LAC: 103,
    OperationType.READ_LAC: 104,
    OperationType.GET_BOOKIE_INFO: 105,
    OperationType.START_TLS: 106,
    OperationType.FORCE_LEDGER: 107,
    OperationType.GET_LIST_OF_ENTRIES_OF_LEDGER: 108,
}


# ---------------------------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class AddRequest:
    """Store one entry. `body` is the digest-wrapped entry packet (ledger.codecs.entry)."""

    operation: ClassVar[OperationType] = OperationType.ADD_ENTRY
    txn_id: int
    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes
    recovery: bool = False  # RECOVERY_ADD: ledger recovery re-adding past the fence
    write_flags: int | None = None  # WriteFlag bits; None leaves the field out (old bookies)
    priority: int = 0


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """Read one entry; entry_id -1 (LAST_ADD_CONFIRMED) reads the bookie's last entry.

    FENCE_LEDGER needs `master_key`. ENTRY_PIGGYBACK (long poll) needs entry_id -1 and
    `previous_lac`; `timeout_ms` bounds the wait of a long poll.
    """

    operation: ClassVar[OperationType] = OperationType.READ_ENTRY
    txn_id: int
    ledger_id: int
    entry_id: int
    flag: ReadFlag | None = None
    master_key: bytes | None = None
    previous_lac: int | None = None
    timeout_ms: int | None = None
    priority: int = 0


@dataclass(frozen=True, slots=True)
class WriteLacRequest:
    """Store an explicit LAC. `body` is the digest-wrapped LAC packet (ledger.codecs.entry)."""

    operation: ClassVar[OperationType] = OperationType.WRITE_LAC
    txn_id: int
    ledger_id: int
    lac: int
    master_key: bytes
    body: bytes
    priority: int = 0


@dataclass(frozen=True, slots=True)
class ReadLacRequest:
    operation: ClassVar[OperationType] = OperationType.READ_LAC
    txn_id: int
    ledger_id: int
    priority: int = 0


@dataclass(frozen=True, slots=True)
class GetBookieInfoRequest:
    operation: ClassVar[OperationType] = OperationType.GET_BOOKIE_INFO
    txn_id: int
    requested: int = BookieInfoFlag.TOTAL_DISK_CAPACITY | BookieInfoFlag.FREE_DISK_SPACE
    priority: int = 0


@dataclass(frozen=True, slots=True)
class ForceLedgerRequest:
    """Fsync every entry of a DEFERRED_SYNC ledger written so far on this bookie."""

    operation: ClassVar[OperationType] = OperationType.FORCE_LEDGER
    txn_id: int
    ledger_id: int
    priority: int = 0


@dataclass(frozen=True, slots=True)
class AuthRequest:
    """Never needed with a default bookie (authentication disabled); see docs/wire-protocol.md."""

    operation: ClassVar[OperationType] = OperationType.AUTH
    txn_id: int
    plugin_name: str
    payload: bytes
    priority: int = 0


Request = (
    AddRequest
    | ReadRequest
    | WriteLacRequest
    | ReadLacRequest
    | GetBookieInfoRequest
    | ForceLedgerRequest
    | AuthRequest
)


# --------------------------------------------------------------------------------- responses


@dataclass(frozen=True, slots=True)
class AddResponse:
    operation: ClassVar[OperationType] = OperationType.ADD_ENTRY
    txn_id: int
    status: StatusCode
    ledger_id: int
    entry_id: int


@dataclass(frozen=True, slots=True)
class ReadResponse:
    """`body` is the stored entry packet; `max_lac` the bookie's known LAC (piggybacked)."""

    operation: ClassVar[OperationType] = OperationType.READ_ENTRY
    txn_id: int
    status: StatusCode
    ledger_id: int
    entry_id: int
    body: bytes | None = None
    max_lac: int | None = None
    lac_update_timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class WriteLacResponse:
    operation: ClassVar[OperationType] = OperationType.WRITE_LAC
    txn_id: int
    status: StatusCode
    ledger_id: int


@dataclass(frozen=True, slots=True)
class ReadLacResponse:
    """`lac_body`: the explicit-LAC packet; `last_entry_body`: the last entry packet on disk."""

    operation: ClassVar[OperationType] = OperationType.READ_LAC
    txn_id: int
    status: StatusCode
    ledger_id: int
    lac_body: bytes | None = None
    last_entry_body: bytes | None = None


@dataclass(frozen=True, slots=True)
class GetBookieInfoResponse:
    operation: ClassVar[OperationType] = OperationType.GET_BOOKIE_INFO
    txn_id: int
    status: StatusCode
    total_disk_capacity: int | None = None
    free_disk_space: int | None = None


@dataclass(frozen=True, slots=True)
class ForceLedgerResponse:
    operation: ClassVar[OperationType] = OperationType.FORCE_LEDGER
    txn_id: int
    status: StatusCode
    ledger_id: int


@dataclass(frozen=True, slots=True)
class AuthResponse:
    operation: ClassVar[OperationType] = OperationType.AUTH
    txn_id: int
    status: StatusCode
    plugin_name: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class StatusOnlyResponse:
    """A rejection without an operation body, e.g. EUA before authentication or EBADREQ for an
    unknown operation; `operation` is the one named in its header."""

    txn_id: int
    operation: OperationType
    status: StatusCode


Response = (
    AddResponse
    | ReadResponse
    | WriteLacResponse
    | ReadLacResponse
    | GetBookieInfoResponse
    | ForceLedgerResponse
    | AuthResponse
    | StatusOnlyResponse
)


def response_error(response: Response) -> BookieError | None:
    """The error a response's status means, or None for EOK."""
    where = f"{response.operation.name} txn {response.txn_id}"
    return status_error(response.status, where)


# ------------------------------------------------------------------------------ header codec


def _header(operation: OperationType, txn_id: int, priority: int) -> Writer:
    header = Writer().uint(1, ProtocolVersion.VERSION_THREE).uint(2, operation).uint(3, txn_id)
    if priority:
        header.uint(4, priority)
    return header


@dataclass(frozen=True, slots=True)
class Header:
    """A decoded BKPacketHeader."""

    version: ProtocolVersion
    operation: OperationType
    txn_id: int
    priority: int


def decode_header(fields: Fields) -> Header:
    header = fields.required(fields.message(HEADER_FIELD, "BKPacketHeader"), HEADER_FIELD, "header")
    return Header(
        version=header.required(header.enum(1, ProtocolVersion), 1, "version"),
        operation=header.required(header.enum(2, OperationType), 2, "operation"),
        txn_id=header.required(header.uint64(3), 3, "txnId"),
        priority=header.uint32(4) or 0,
    )


def body_field(operation: OperationType, what: str) -> int:
    """The Request/Response field carrying `operation`'s body; ProtocolError if unsupported."""
    field = BODY_FIELDS.get(operation)
    if field is None:
        raise ProtocolError(f"{what}: operation {operation.name} is not supported")
    return field


def envelope_request(request: Request, body: Writer) -> bytes:
    """The serialized Request message (no frame prefix) around an encoded body."""
    field = BODY_FIELDS[request.operation]
    header = _header(request.operation, request.txn_id, request.priority)
    return Writer().message(HEADER_FIELD, header).message(field, body).finish()


def envelope_response(response: Response, body: Writer | None) -> bytes:
    """The serialized Response message; the top-level status repeats the body's, as bookies do."""
    out = Writer().message(HEADER_FIELD, _header(response.operation, response.txn_id, 0))
    out.uint(STATUS_FIELD, response.status)
    if body is not None:
        out.message(BODY_FIELDS[response.operation], body)
    return out.finish()
