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


class MarkerFormatError(MetadataFormatError):
    """An under-replication marker, claim or layout znode whose text is not the protobuf text
    format BookKeeper writes there."""


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


class BookieBadRequestError(BookieError):
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


# ------------------------------------------------ no verdict: the request failed in transit
# (a bookie's verdict on a request is a BookieError above)


class BookieConnectionError(GlobelogError):
    """A request to a bookie failed in transit; the bookie said nothing about it."""

    code = "bookie_connection_error"
    retriable = True


class BookieUnavailableError(BookieConnectionError):
    """The bookie cannot be connected to, or failed recently and is not retried before its
    backoff ends (requests fail at once instead of each waiting for a timeout)."""

    code = "bookie_unavailable"


class BookieTimeoutError(BookieConnectionError):
    """No response within the request's timeout (which covers waiting for an in-flight slot)."""

    code = "bookie_timeout"


class ConnectionLostError(BookieConnectionError):
    """The connection closed (EOF, reset, or stalled) while the request was in flight."""

    code = "bookie_connection_lost"


class BookieProtocolError(ProtocolError, BookieConnectionError):
    """The bookie sent bytes that break the protocol; the connection was closed.

    A ProtocolError (the stream is unusable), yet retriable: a new connection starts clean.
    """

    code = "bookie_protocol_violation"
    retriable = True


class ClientClosedError(GlobelogError):
    """This client closed the connection or the pool; requests in flight are abandoned."""

    code = "bookie_client_closed"
    retriable = False


class PoolFullError(GlobelogError):
    """The pool already tracks its bound of distinct bookies; a new bookie id was refused."""

    code = "bookie_pool_full"
    retriable = False


class BookieUnreachableError(GlobelogError):
    """No answer from a bookie address within the timeout (down, paused or partitioned)."""

    code = "bookie_unreachable"
    retriable = True


# ------------------------------------------------------------ what ledger handles raise


class LedgerHandleError(GlobelogError):
    code = "ledger_error"


class LedgerFencedError(LedgerHandleError):
    """Another client fenced the ledger (recovery): this writer's adds are never acknowledged."""

    code = "ledger_fenced"


class LedgerClosedError(LedgerHandleError):
    code = "ledger_closed"


class LedgerUnauthorizedError(LedgerHandleError):
    code = "ledger_unauthorized"


class EnsembleChangeError(LedgerHandleError):
    """No valid replacement bookie, or the metadata update failed: the handle is finished."""

    code = "ensemble_change_failed"


class LedgerRecoveryError(LedgerHandleError):
    """Recovery could not finish; the ledger stays IN_RECOVERY and anyone may retry."""

    code = "ledger_recovery_failed"
    retriable = True


class LedgerInternalError(LedgerHandleError):
    """The handle failed because of a bug in globelog (a task died of an unexpected error)."""

    code = "ledger_internal"


class LedgerRecoveryTimeoutError(LedgerRecoveryError):
    """Recovery did not finish within `LedgerConfig.recovery_timeout_s` (bookies out of reach);
    the ledger stays IN_RECOVERY and may be recovered again later."""

    code = "ledger_recovery_timeout"
    retriable = True


class EntryUnavailableError(LedgerHandleError):
    """No replica returned a valid copy right now (down, slow or corrupt replicas)."""

    code = "entry_unavailable"
    retriable = True


class EntryMissingError(LedgerHandleError):
    code = "entry_missing"


class ReadBeyondLacError(LedgerHandleError):
    """Reading past the LAC would expose entries that may never be acknowledged (I4)."""

    code = "read_beyond_lac"


# ------------------------------------------------------------------- ledger metadata store


class LedgerExistsError(GlobelogError):
    code = "ledger_exists"


class NoSuchLedgerMetadataError(GlobelogError):
    code = "ledger_not_found"


class LedgerMetadataConflictError(GlobelogError):
    """A compare-and-set lost to another writer; re-read the metadata and decide again."""

    code = "ledger_metadata_conflict"


# The one table: every non-OK status code and the error class it becomes.
STATUS_ERRORS: Mapping[StatusCode, type[BookieError]] = MappingProxyType(
    {
        StatusCode.ENOLEDGER: NoSuchLedgerError,
        StatusCode.ENOENTRY: NoSuchEntryError,
        StatusCode.EBADREQ: BookieBadRequestError,
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
