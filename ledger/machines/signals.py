"""What the ledger state machines share: the tick, the kinds of bookie failure, health reports.

The machines (add_state, read_lac_state, read_state, recovery_state) never see an exception
or a socket; each queues its actions in an `Outbox` the driver drains. The driver turns each
bookie answer into an event; a failed request becomes a `BookieFailure` through
`failure_kind`, the one table from errors to kinds. Machines report what they learnt about
bookies with `RecordHealth`, which the driver passes to the placement health tracker
(`record_failure`, `record_slow`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, TypeVar

from ledger.errors import (
    BookieConnectionError,
    BookieTimeoutError,
    DigestMismatchError,
    FencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ProtocolError,
    ReadOnlyError,
    UnauthorizedError,
)

A = TypeVar("A")

READ_TIMEOUT_S = 5.0  # BK readTimeout: an unanswered read counts as a failed bookie


class BookieFailure(enum.Enum):
    """Why one request to one bookie did not succeed."""

    FENCED = "fenced"  # the ledger is fenced on the bookie: another client recovers it
    UNAUTHORIZED = "unauthorized"  # wrong master key (ledger password) or not authenticated
    TIMEOUT = "timeout"  # no answer within the machine's (or driver's) deadline
    BOOKIE_DOWN = "bookie_down"  # connection refused or lost, protocol error on the stream
    READ_ONLY = "read_only"  # the bookie refuses writes for now
    NO_SUCH_LEDGER = "no_such_ledger"  # the bookie holds nothing of the ledger
    NO_SUCH_ENTRY = "no_such_entry"  # the bookie holds the ledger but not the entry
    DIGEST_MISMATCH = "digest_mismatch"  # the answer failed its digest: a corrupt replica
    OTHER = "other"  # any other bookie status (EIO, EBADREQ, ETOOMANYREQUESTS, ...)

    @property
    def answered(self) -> bool:
        """The bookie itself said so; False for silence (no answer in time, a connection
        that failed or stalled), which is what a cut looks like."""
        return self not in (BookieFailure.TIMEOUT, BookieFailure.BOOKIE_DOWN)

    @property
    def holds_nothing(self) -> bool:
        """The bookie positively says it has no copy (it answered, and it is not an error)."""
        return self in (BookieFailure.NO_SUCH_LEDGER, BookieFailure.NO_SUCH_ENTRY)


@dataclass(frozen=True, slots=True)
class Ticked:
    """Event: the driver's clock reads `now_s` (monotonic seconds). Deadlines fire on ticks."""

    now_s: float


class Health(enum.Enum):
    SLOW = "slow"  # a later replica answered a speculative read first
    FAILED = "failed"  # the bookie answered with an error, or did not answer in time


@dataclass(frozen=True, slots=True)
class RecordHealth:
    """Action: tell the placement health tracker what this request showed about `bookie`."""

    bookie: str
    health: Health


# The one table from the errors a driver sees to failure kinds; the most specific class wins.
FAILURE_KINDS: Mapping[type[BaseException], BookieFailure] = MappingProxyType(
    {
        FencedError: BookieFailure.FENCED,
        UnauthorizedError: BookieFailure.UNAUTHORIZED,
        ReadOnlyError: BookieFailure.READ_ONLY,
        NoSuchLedgerError: BookieFailure.NO_SUCH_LEDGER,
        NoSuchEntryError: BookieFailure.NO_SUCH_ENTRY,
        DigestMismatchError: BookieFailure.DIGEST_MISMATCH,
        ProtocolError: BookieFailure.BOOKIE_DOWN,  # the connection is unusable
        BookieTimeoutError: BookieFailure.TIMEOUT,
        BookieConnectionError: BookieFailure.BOOKIE_DOWN,  # unreachable, lost, backing off
        TimeoutError: BookieFailure.TIMEOUT,
        ConnectionError: BookieFailure.BOOKIE_DOWN,
        OSError: BookieFailure.BOOKIE_DOWN,
    }
)


def failure_kind(error: BaseException) -> BookieFailure:
    """The kind of a failed bookie request, from the error the driver caught or decoded."""
    for cls in type(error).__mro__:
        kind = FAILURE_KINDS.get(cls)
        if kind is not None:
            return kind
    return BookieFailure.OTHER


def bookie_list(bookies: Iterable[str]) -> str:
    """Bookie ids as messages show them: "[b0, b1, b2]"."""
    return "[" + ", ".join(bookies) + "]"


class Outbox(Generic[A]):
    """The actions a machine emitted that the driver has not taken yet.

    `seal()` marks the machine's terminal state: emitting after it is a bug and fails at once.
    """

    def __init__(self) -> None:
        self._actions: list[A] = []
        self.sealed = False

    def emit(self, action: A) -> None:
        assert not self.sealed, f"action after the terminal state: {action}"
        self._actions.append(action)

    def take(self) -> list[A]:
        actions, self._actions = self._actions, []
        return actions

    def seal(self) -> None:
        self.sealed = True
