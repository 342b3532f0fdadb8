"""The ledger client's errors, and the one table mapping bookie status codes to them.

`retriable` means: the same request may succeed if sent again later (to the same bookie).
A non-retriable bookie answer is still a normal outcome for the replication logic: NoSuchEntry
from one replica sends a read to the next, Fenced tells a writer it lost the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from core.errors import GlobelogError
from ledger.codes import StatusCode


class ProtocolError(GlobelogError):
    """Bytes from outside (a bookie, a znode) do not follow the protocol; the stream is unusable.

    A connection that produced one must be closed; its in-flight requests count as failed.
    """

    code = "protocol_error"


class MetadataFormatError(ProtocolError):
    """A ledger metadata znode does not hold valid BookKeeper v3 ledger metadata."""

    code = "ledger_metadata_invalid"


class FrameTooLargeError(GlobelogError):
    """A request we were asked to send exceeds the frame bound the bookie enforces."""

    code = "frame_too_large"


class DigestMismatchError(GlobelogError):
    """An entry or LAC packet failed its digest or id check: a corrupt replica, read another."""

    code = "digest_mismatch"


class LedgerIdOverflowError(GlobelogError):
    """A sequential id znode gave an id outside the range of its id generation scheme."""

    code = "ledger_id_overflow"


class BookieError(GlobelogError):
    """A bookie answered a request with a non-OK status."""

    code = "bookie_error"
    status: StatusCode | None = None


class NoSuchLedgerError(BookieError):
    code = "bookie_no_such_ledger"
    status = StatusCode.ENOLEDGER


class NoSuchEntryError(BookieError):
    code = "bookie_no_such_entry"
    status = StatusCode.ENOENTRY


class BadRequestError(BookieError):
    code = "bookie_bad_request"
    status = StatusCode.EBADREQ


class BookieIOError(BookieError):
    code = "bookie_io_error"
    status = StatusCode.EIO
    retriable = True


class UnauthorizedError(BookieError):
    """Wrong master key for the ledger, or the connection is not authenticated."""

    code = "bookie_unauthorized"
    status = StatusCode.EUA


class ProtocolVersionError(BookieError):
    code = "bookie_bad_version"
    status = StatusCode.EBADVERSION


class FencedError(BookieError):
    """The ledger is fenced on this bookie: another client is recovering or has recovered it."""

    code = "bookie_fenced"
    status = StatusCode.EFENCED


class ReadOnlyError(BookieError):
    """The bookie is read-only (no writable disk); it may become writable again."""

    code = "bookie_read_only"
    status = StatusCode.EREADONLY
    retriable = True


class TooManyRequestsError(BookieError):
    code = "bookie_too_many_requests"
    status = StatusCode.ETOOMANYREQUESTS
    retriable = True


class UnknownLedgerStateError(BookieError):
    """The bookie lost data of this ledger and cannot yet say what it holds."""

    code = "bookie_unknown_ledger_state"
    status = StatusCode.EUNKNOWNLEDGERSTATE
    retriable = True


# The one table: every non-OK status code and the error class it becomes.
STATUS_ERRORS: Mapping[StatusCode, type[BookieError]] = MappingProxyType(
    {
        StatusCode.ENOLEDGER: NoSuchLedgerError,
        StatusCode.ENOENTRY: NoSuchEntryError,
        StatusCode.EBADREQ: BadRequestError,
        StatusCode.EIO: BookieIOError,
        StatusCode.EUA: UnauthorizedError,
        StatusCode.EBADVERSION: ProtocolVersionError,
        StatusCode.EFENCED: FencedError,
        StatusCode.EREADONLY: ReadOnlyError,
        StatusCode.ETOOMANYREQUESTS: TooManyRequestsError,
        StatusCode.EUNKNOWNLEDGERSTATE: UnknownLedgerStateError,
    }
)


def status_error(status: StatusCode, where: str) -> BookieError | None:
    """The error for a bookie's `status` (None for EOK); `where` names the request."""
    if status is StatusCode.EOK:
        return None
    error_class = STATUS_ERRORS[status]
    return error_class(f"{where}: bookie answered {status.name} ({int(status)})")
