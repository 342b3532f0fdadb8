"""The events `LogWriterState` takes and the actions it emits (see writer.state)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from core.dlsn import DLSN
from core.records import StoredRecord


class FailureKind(enum.Enum):
    FENCED = "fenced"  # the segment's ledger was fenced: a new owner took the stream
    TRANSMIT = "transmit"  # an add failed for another reason (no valid ensemble, closed, ...)
    ROLL = "roll"  # completing the segment or starting the next one failed
    OWNERSHIP = "ownership"  # the ownership lock is gone (session expired)
    CLOSED = "closed"  # the writer was closed before the write was transmitted


# ---------------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Ticked:
    now_s: float


@dataclass(frozen=True, slots=True)
class EntryAcked:
    transmit_id: int
    entry_id: int


@dataclass(frozen=True, slots=True)
class EntryFailed:
    transmit_id: int
    kind: FailureKind
    reason: str


@dataclass(frozen=True, slots=True)
class SegmentStarted:
    """The driver opened segment `sequence` (after a RollSegment); its first record's seq."""

    sequence: int
    first_seq: int
    now_s: float


@dataclass(frozen=True, slots=True)
class WriterFailed:
    """Something outside the adds failed (a roll, the ownership lock, a driver task)."""

    kind: FailureKind
    reason: str


@dataclass(frozen=True, slots=True)
class RollRequested:
    """Start the next segment now (its ensemble placed afresh): the open one names a bookie
    that is leaving. An empty segment does not roll: it has nothing to move."""


WriterEvent = Ticked | EntryAcked | EntryFailed | SegmentStarted | WriterFailed | RollRequested

# --------------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class TransmitEntry:
    """Append these records as one entry of the current segment's ledger."""

    transmit_id: int
    records: Sequence[StoredRecord]
    first_position: int  # user records of the segment before this entry


class Written(NamedTuple):
    """An acknowledged write: where it is, its txid and its sequence id (-1: end of stream).

    A named tuple, not a dataclass: one is made per acknowledged record.
    """

    dlsn: DLSN
    txid: int
    seq: int


@dataclass(frozen=True, slots=True)
class CompleteWrites:
    """Writes acknowledged, in order: (write id, what was written)."""

    results: tuple[tuple[int, Written], ...]


@dataclass(frozen=True, slots=True)
class FailWrites:
    write_ids: tuple[int, ...]
    kind: FailureKind
    reason: str


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What completing a segment writes into its metadata."""

    sequence: int
    last_txid: int
    last_dlsn: DLSN | None  # None: no user record in the segment
    record_count: int
    end_of_stream: bool


@dataclass(frozen=True, slots=True)
class RollSegment:
    """Close the ledger, complete the segment with `summary`, start the next (SegmentStarted)."""

    summary: SegmentSummary


@dataclass(frozen=True, slots=True)
class CloseSegment:
    """Close the ledger and complete the segment with `summary`; the writer is done."""

    summary: SegmentSummary


WriterAction = TransmitEntry | CompleteWrites | FailWrites | RollSegment | CloseSegment
