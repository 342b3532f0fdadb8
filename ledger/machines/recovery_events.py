"""The events `RecoveryState` takes and the actions it emits (see ledger.machines.recovery_state)."""

from __future__ import annotations

from dataclasses import dataclass

from ledger.machines.add_events import (
    AddAcked,
    AddFailed,
    ChangeEnsemble,
    CloseLedger,
    CompleteAdds,
    EnsembleChanged,
    EnsembleChangeFailed,
    SendAdd,
)
from ledger.machines.read_lac_state import LacReadFailed, LacReplied, SendReadLac
from ledger.machines.read_state import CompleteRead, EntryRead, EntryReadFailed, SendRead
from ledger.machines.signals import RecordHealth, Ticked


@dataclass(frozen=True, slots=True)
class FailRecovery:
    message: str


RecoveryEvent = (
    LacReplied
    | LacReadFailed
    | EntryRead
    | EntryReadFailed
    | AddAcked
    | AddFailed
    | EnsembleChanged
    | EnsembleChangeFailed
    | Ticked
)
RecoveryAction = (
    SendReadLac
    | SendRead
    | CompleteRead  # keep that bookie's body of the entry: it is re-added (SendAdd)
    | RecordHealth
    | SendAdd
    | CompleteAdds  # the re-add of those entries is done; their bodies can go
    | ChangeEnsemble
    | CloseLedger
    | FailRecovery
)
