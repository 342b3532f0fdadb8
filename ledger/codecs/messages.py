"""Typed v3 bookie requests and responses.

ledger.codecs.message_codec turns them into bytes and back (over the protobuf schema in
ledger/codecs/proto/bookkeeper.proto); ledger.codecs.frames adds the 4-byte length prefix.

A response's `status` is the effective one, as BookKeeper's client computes it: the top-level
Response.status when it is not EOK, else the status inside the operation's response.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ledger.codes import BookieInfoFlag, OperationType, ReadFlag, StatusCode
from ledger.errors import BookieError, status_error

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
