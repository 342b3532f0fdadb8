"""The table from the add machine's error kinds to the errors a ledger handle raises (the
classes themselves are in ledger.errors, with every other error of the ledger), and which
per-bookie outcomes a handle may count as one bookie failing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from core.errors import GlobelogError
from ledger.errors import (
    EnsembleChangeError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerHandleError,
    LedgerInternalError,
    LedgerUnauthorizedError,
)
from ledger.machines.add_events import AddError, AddErrorKind

ADD_ERRORS: Mapping[AddErrorKind, type[LedgerHandleError]] = MappingProxyType(
    {
        AddErrorKind.FENCED: LedgerFencedError,
        AddErrorKind.UNAUTHORIZED: LedgerUnauthorizedError,
        AddErrorKind.CLOSED: LedgerClosedError,
        AddErrorKind.ENSEMBLE_CHANGE_FAILED: EnsembleChangeError,
        AddErrorKind.TOO_MANY_ENSEMBLE_CHANGES: EnsembleChangeError,
        AddErrorKind.INTERNAL: LedgerInternalError,
    }
)


def add_error(ledger_id: int, error: AddError) -> LedgerHandleError:
    return ADD_ERRORS[error.kind](f"ledger {ledger_id}: {error.message}")


def raise_bugs(outcomes: Sequence[object]) -> None:
    """Raises the first outcome of a per-bookie gather that is an error but not globelog's:
    a bookie that fails answers with a globelog error; anything else is a bug, never to be
    counted as one bookie not answering and dropped."""
    for outcome in outcomes:
        if isinstance(outcome, Exception) and not isinstance(outcome, GlobelogError):
            raise outcome
