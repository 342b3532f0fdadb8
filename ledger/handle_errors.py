"""Errors a ledger handle raises to its caller, and the table from the machines' error kinds."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from core.errors import GlobelogError
from ledger.add_events import AddError, AddErrorKind


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
