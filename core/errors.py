"""The one globelog exception hierarchy: every error has a stable code and a retriable flag."""

from __future__ import annotations


class GlobelogError(Exception):
    """Root of every error globelog raises on purpose.

    Retry and redirect logic reads `code` and `retriable`, never the message text.
    """

    code = "internal"
    retriable = False


class ConfigError(GlobelogError):
    """Configuration (topology.yaml, flags) is invalid; nothing was started or changed."""

    code = "config_invalid"


class TopologyError(ConfigError):
    """topology.yaml has one or more problems; `problems` lists each with its YAML path."""

    code = "topology_invalid"

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s):\n{lines}")


class QuorumError(ConfigError):
    """Replication settings that cannot keep the durability invariant."""

    code = "quorum_invalid"


class MetadataError(GlobelogError):
    """A metadata (ZooKeeper) operation failed for an operating reason."""

    code = "metadata_error"


class MetadataUnavailableError(MetadataError):
    """The metadata store cannot be reached right now (connection loss, timeout)."""

    code = "metadata_unavailable"
    retriable = True


class SessionExpiredError(MetadataError):
    """The metadata session expired: ephemeral nodes and watches of it are gone."""

    code = "metadata_session_expired"


class NodeExistsError(MetadataError):
    code = "metadata_node_exists"


class NoNodeError(MetadataError):
    code = "metadata_no_node"


class BadVersionError(MetadataError):
    """A versioned compare-and-set lost a race: someone else changed the node first."""

    code = "metadata_bad_version"


class NotEmptyError(MetadataError):
    code = "metadata_not_empty"


class ClusterError(GlobelogError):
    """The local cluster launcher could not start, find or control a process."""

    code = "cluster_error"


# ------------------------------------------------------------------------------- streams


class StreamError(GlobelogError):
    """A log stream operation failed; subclasses carry the stable code."""

    code = "stream_error"


class InvalidDlsnError(StreamError):
    """A DLSN's text or numbers are malformed (nothing was read or written)."""

    code = "invalid_dlsn"


class InvalidStreamNameError(StreamError):
    code = "invalid_stream_name"


class StreamNotFoundError(StreamError):
    code = "stream_not_found"


class StreamExistsError(StreamError):
    code = "stream_exists"


class RecordTooLargeError(StreamError):
    """A record (or a batch of them) is over its named limit; nothing was written."""

    code = "record_too_large"


class TxidOutOfOrderError(StreamError):
    """A write's txid is below the stream's last txid: txids never go backwards."""

    code = "txid_out_of_order"


class InvalidRecordError(StreamError):
    """A record's fields are not acceptable (txid out of range, reserved flags, ...)."""

    code = "invalid_record"


class EntryFormatError(StreamError):
    """Bytes read from a bookie are not a valid globelog entry (corruption or a foreign ledger)."""

    code = "entry_format_invalid"


class SegmentMetadataError(StreamError):
    """A segment's metadata in ZooKeeper is not in the documented format."""

    code = "segment_metadata_invalid"


class OwnershipError(StreamError):
    """Another writer owns the stream; `owner` says who (retriable: owners come and go)."""

    code = "owner_exists"
    retriable = True

    def __init__(self, message: str, owner: str = "") -> None:
        super().__init__(message)
        self.owner = owner


class OwnerFencedError(StreamError):
    """This writer lost the stream (a new owner fenced its segment); none of its later writes
    is acknowledged. Reopen a writer to continue, which takes ownership again."""

    code = "owner_fenced"


class WriteFailedError(StreamError):
    """A transmit failed, so every pending write of this writer failed; reopen the writer."""

    code = "write_failed"
    retriable = True


class WriterClosedError(StreamError):
    code = "writer_closed"


class EndOfStreamError(StreamError):
    """The stream was sealed with mark_end_of_stream: no record follows the end."""

    code = "end_of_stream"


class TruncatedPositionError(StreamError):
    """A read was positioned before the stream's first active record (truncated data)."""

    code = "position_truncated"


class ArchiveCheckError(StreamError):
    """A segment's archived copy does not hold exactly the segment's records; the segment
    is not marked archived (so retention keeps its ledger)."""

    code = "archive_check_failed"


class DataLossError(StreamError):
    """Records in `first`..`last` (DLSN text) cannot be served by any bookie: lost data.

    Reported once to the reader; the next read continues after the lost range.
    """

    code = "data_loss"

    def __init__(self, message: str, first: str, last: str) -> None:
        super().__init__(message)
        self.first = first
        self.last = last


class ReadTimeoutError(StreamError):
    code = "read_timeout"
    retriable = True


# ------------------------------------------------------------------------ region services


class ServiceError(GlobelogError):
    """A proxy refused a request before touching any stream."""

    code = "service_error"


class BadRequestError(ServiceError):
    """The request itself is malformed: what was received and what was expected."""

    code = "bad_request"


class OverCapacityError(ServiceError):
    """A limit (request size, bytes in flight for a stream) is reached; retry later."""

    code = "over_capacity"
    retriable = True


class QuotaExceededError(ServiceError):
    """The client used its quota of a proxy (bytes or requests per second); retry after
    `retry_after_s`, when the quota has room for the request again."""

    code = "quota_exceeded"
    retriable = True

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class NotFoundError(ServiceError):
    """The request names something that is not there (a path, a token id)."""

    code = "not_found"


class RequestTooLargeError(ServiceError):
    """A request's body is over what its endpoint takes; nothing of it was done."""

    code = "request_too_large"


class UnauthenticatedError(ServiceError):
    """The request carried no token the proxy accepts: none, malformed, expired, revoked, signed
    by another key. The message says which; nothing was done."""

    code = "unauthenticated"


class ForbiddenError(ServiceError):
    """The request's token is valid but its scope lacks what the request needs (the message
    names the operation and the resource); nothing was done."""

    code = "forbidden"


class RequestTimeoutError(ServiceError):
    """A request's body did not arrive within the proxy's deadline; nothing of it was done."""

    code = "request_timeout"
    retriable = True


class SeqMismatchError(StreamError):
    """A conditional append named a sequence id other than the one it would land at."""

    code = "seq_mismatch"


class SessionFencedError(StreamError):
    """A session write named a session that a newer one (a new owner, or a client that fenced
    the session) replaced; ask for the current session before writing again."""

    code = "session_fenced"


class ProducerSeqStaleError(StreamError):
    """An idempotent write named a producer seq older than the window the owner remembers:
    whether it landed is no longer known, so it is neither written nor answered."""

    code = "producer_seq_stale"


class ProducerSeqInFlightError(ServiceError):
    """An idempotent write's (producer, seq) is being written by an earlier request (a retry
    that came too soon); retried, it is answered with where that write landed."""

    code = "producer_seq_in_flight"
    retriable = True


class OwnerUnreachableError(ServiceError):
    """The stream's owner is known but cannot be reached to redirect to."""

    code = "owner_unreachable"
    retriable = True


class StorageUnavailableError(ServiceError):
    """The bookies or ledgers below a proxy failed the request (a recovery that failed, too
    few bookies, a bookie that timed out); the message starts with the storage error's code.
    Nothing of the request was written."""

    code = "storage_unavailable"
    retriable = True


class OutcomeUnknownError(StreamError):
    """A write may or may not have been appended: it was accepted (possibly sent to the
    bookies) and then its writer failed, or no answer came. `cause` is the code of what
    failed. An idempotent write retried is answered with where it landed, if it did; a plain
    write retried may land twice."""

    code = "outcome_unknown"
    retriable = True

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause

    @classmethod
    def after(cls, err: Exception, what: str) -> OutcomeUnknownError:
        """The answer for a write (`what`) accepted before `err` failed it (a globelog
        error, or a TimeoutError: no acknowledgement in time)."""
        if isinstance(err, GlobelogError):
            cause, text = err.code, str(err)
        else:
            cause, text = "timeout", f"no acknowledgement in time ({type(err).__name__})"
        return cls(f"{what} may have been appended: it was accepted, then {cause}: {text}", cause)


class ProxyError(ServiceError):
    """An error a proxy answered with a code the table below does not know: the code,
    retriable flag and HTTP status as answered."""

    def __init__(self, code: str, message: str, retriable: bool, status: int) -> None:
        super().__init__(f"[{code}] {message} (HTTP {status})")
        self.code = code
        self.retriable = retriable
        self.status = status


class ProxyUnreachableError(ServiceError):
    """No answer from a proxy: connection refused or reset, no answer in time, not JSON.
    `maybe_sent` is False only when no connection was made (the request cannot have reached
    the proxy); otherwise a write may have been appended."""

    code = "proxy_unreachable"
    retriable = True

    def __init__(self, message: str, maybe_sent: bool = True) -> None:
        super().__init__(message)
        self.maybe_sent = maybe_sent


# ------------------------------------------------------------------ errors answered by code

# Each error a server may answer with (an HTTP JSON body's "code"), so a client raises the
# class the library raises for the same condition and callers catch classes instead of
# comparing code strings. One constructor argument each: the message answered.
ANSWERED_ERRORS: tuple[type[GlobelogError], ...] = (
    MetadataUnavailableError,
    SessionExpiredError,
    InvalidDlsnError,
    InvalidStreamNameError,
    StreamNotFoundError,
    StreamExistsError,
    RecordTooLargeError,
    TxidOutOfOrderError,
    InvalidRecordError,
    EntryFormatError,
    SegmentMetadataError,
    OwnershipError,
    OwnerFencedError,
    WriteFailedError,
    WriterClosedError,
    EndOfStreamError,
    TruncatedPositionError,
    ReadTimeoutError,
    BadRequestError,
    OverCapacityError,
    QuotaExceededError,
    RequestTimeoutError,
    SeqMismatchError,
    SessionFencedError,
    ProducerSeqStaleError,
    ProducerSeqInFlightError,
    OwnerUnreachableError,
    StorageUnavailableError,
    OutcomeUnknownError,
    UnauthenticatedError,
    ForbiddenError,
    NotFoundError,
    RequestTooLargeError,
)
ERROR_BY_CODE: dict[str, type[GlobelogError]] = {cls.code: cls for cls in ANSWERED_ERRORS}
assert len(ERROR_BY_CODE) == len(ANSWERED_ERRORS), "every answered code names one class"


def answered_error(code: str, message: str, retriable: bool) -> GlobelogError | None:
    """The library's error for a code a server answered with, or None for a code it does not
    know. `retriable` is the server's word for this request (a proxy replaces a fenced writer
    on the next request, so it calls `owner_fenced` retriable where the library's writer that
    raised it is finished)."""
    cls = ERROR_BY_CODE.get(code)
    if cls is None:
        return None
    error = cls(message)
    error.retriable = retriable
    return error
