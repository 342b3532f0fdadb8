"""The events `AddState` takes and the actions it emits (see ledger.machines.add_state)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ledger.codecs.metadata import Ensemble
from ledger.machines.signals import BookieFailure, Ticked


class AddErrorKind(enum.Enum):
    FENCED = "fenced"  # another client fenced the ledger (recovery): this writer lost it
    UNAUTHORIZED = "unauthorized"  # a bookie refused the ledger password or the client
    CLOSED = "closed"  # the handle (or the ledger's metadata) is closed
    ENSEMBLE_CHANGE_FAILED = "ensemble_change_failed"  # no replacement, or metadata failed
    TOO_MANY_ENSEMBLE_CHANGES = "too_many_ensemble_changes"  # AddConfig.ensemble_changes_max
    INTERNAL = "internal"  # a task of the writer died of an unexpected error (a bug)


@dataclass(frozen=True, slots=True)
class AddError:
    kind: AddErrorKind
    message: str


# Answers that end the handle instead of replacing the bookie (BK: LedgerFenced, Unauthorized).
FATAL_ANSWERS: Mapping[BookieFailure, tuple[AddErrorKind, str]] = MappingProxyType(
    {
        BookieFailure.FENCED: (
            AddErrorKind.FENCED,
            "another client fenced the ledger to recover it; this writer no longer owns it",
        ),
        BookieFailure.UNAUTHORIZED: (
            AddErrorKind.UNAUTHORIZED,
            "refused this client: a wrong ledger password, or no authorized client certificate",
        ),
    }
)


# ---------------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class AddAcked:
    entry_id: int
    bookie: str


@dataclass(frozen=True, slots=True)
class AddFailed:
    entry_id: int
    bookie: str
    kind: BookieFailure


@dataclass(frozen=True, slots=True)
class EnsembleChanged:
    """The metadata now holds `ensemble` from `first_entry_id` (= the LAC + 1 asked for)."""

    first_entry_id: int
    ensemble: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class EnsembleChangeFailed:
    """kind: FENCED (metadata IN_RECOVERY), CLOSED, or ENSEMBLE_CHANGE_FAILED (no bookies...)."""

    kind: AddErrorKind
    reason: str


@dataclass(frozen=True, slots=True)
class SendSkipped:
    """The driver did not send `SendAdd(entry_id, bookie)`: the entry completed (or failed)
    before it went out. No answer will come, and none is owed: the send is forgotten, never
    timed out (a send that never went out must not mark a healthy bookie failed)."""

    entry_id: int
    bookie: str


@dataclass(frozen=True, slots=True)
class TaskCrashed:
    """A task of the driver died of an error it did not turn into an event: the handle fails
    (never a silent log line and a machine left waiting)."""

    reason: str


AddEvent = (
    AddAcked
    | AddFailed
    | EnsembleChanged
    | EnsembleChangeFailed
    | SendSkipped
    | TaskCrashed
    | Ticked
)

# --------------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class SendAdd:
    """Send entry `entry_id` to `bookie` (ensemble position `bookie_index`).

    The packet header carries `lac` (the LAC when the entry was submitted) and `length` (the
    ledger's length through this entry); both are fixed per entry, so a resend is the same bytes.
    """

    entry_id: int
    bookie_index: int
    bookie: str
    lac: int
    length: int
    recovery: bool  # AddFlag.RECOVERY_ADD: the bookie skips the fence check
    # A completed entry's copy for a bookie an ensemble change put in its write set: sent
    # even though the entry is done. The last of them is its payload's last use: the driver
    # drops the payload once that send has it.
    owed: bool = False
    last_use: bool = False


@dataclass(frozen=True, slots=True)
class CompleteAdds:
    """Entries first..last are durable (acked by a quorum), in order; the LAC is now `last`."""

    first_entry_id: int
    last_entry_id: int
    length: int  # the ledger's length through last_entry_id
    # Completed during an ensemble change: keep the payloads, whose copies for the new
    # bookies are sent once the change lands (`SendAdd.last_use`, or `ForgetPayloads`).
    keep_payloads: bool = False


@dataclass(frozen=True, slots=True)
class ForgetPayloads:
    """Entries completed during an ensemble change that owe no copy after it: drop the
    payloads `CompleteAdds.keep_payloads` kept."""

    entry_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ChangeEnsemble:
    """Replace the bookies at `indices`; the new ensemble serves entries from `first_entry_id`.

    persist: write it to the metadata now (a writer: CAS on an OPEN ledger, then feed
    EnsembleChanged). False during recovery: only feed EnsembleChanged; `CloseLedger.ensembles`
    carries it into the closed metadata. As in BookKeeper, a recovery that fails half way then
    leaves no ensemble behind that would send the next recovery to the wrong bookies.
    """

    first_entry_id: int
    indices: tuple[int, ...]
    bookies: tuple[str, ...]  # the failed bookies at those indices
    persist: bool
    # True: only bookies that held up an ack quorum (`AddConfig.quorum_lag_s`), none failed;
    # a placement with no better bookie then answers at once with the same ensemble
    lagging: bool = False
    # those of `bookies` that fell silent (timed out or lagged) rather than answered a
    # failure: their region mates are picked last, as a cut link is likely behind them too
    silent: tuple[str, ...] = ()
    # True: no bookie failed; the writer asked to move one to a region the ensemble does
    # not span (`AddState.respread`). A placement that cannot answers with the same ensemble.
    respread: bool = False

    @property
    def only_silent(self) -> bool:
        """Every bookie to replace fell silent or is slow: with nowhere to move them, they
        are waited for or asked again rather than the handle failing."""
        return self.lagging or set(self.bookies) <= set(self.silent)


@dataclass(frozen=True, slots=True)
class FailAdds:
    entry_ids: tuple[int, ...]
    error: AddError


@dataclass(frozen=True, slots=True)
class CloseLedger:
    """Write the ledger's metadata as CLOSED at `last_entry_id` with `length` bytes.

    `ensembles`: ensembles recovery changed to and did not persist, to add to the history in
    the same write (one starting where the last one starts replaces it). Empty for a writer.
    """

    last_entry_id: int
    length: int
    ensembles: tuple[Ensemble, ...] = ()


@dataclass(frozen=True, slots=True)
class FailClose:
    error: AddError


AddAction = (
    SendAdd | CompleteAdds | ForgetPayloads | ChangeEnsemble | FailAdds | CloseLedger | FailClose
)
