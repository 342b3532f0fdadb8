"""The table from the add machine's error kinds to the errors a ledger handle raises (the
classes themselves are in ledger.errors, with every other error of the ledger)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

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
