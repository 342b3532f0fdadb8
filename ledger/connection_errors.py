"""Errors of the bookie connection layer: the request got no verdict from the bookie.

A bookie's verdict on a request (a non-OK status) is a `ledger.errors.BookieError`. These are
the other outcomes: the bookie could not be reached, did not answer in time, closed the
connection, or sent bytes that break the protocol. All but `ClientClosedError` are retriable:
the same request may succeed on a new connection later, or at another replica. Each message
names the bookie id and the address dialled (a WAN proxy for a bookie in another region).
"""

from __future__ import annotations

from core.errors import GlobelogError
from ledger.errors import ProtocolError


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
