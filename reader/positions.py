"""Where a read starts: positions by DLSN, txid, sequence id or time over a segment list. Pure.

A position names the first record to deliver. The segment-level choice is made here, over
the metadata alone; the reader then searches inside the chosen segment's entries (a binary
search: txids, sequence ids and write times never decrease along a stream).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from core.dlsn import DLSN
from core.errors import InvalidRecordError, TruncatedPositionError
from core.segments import SegmentMetadata, Truncation


class By(enum.Enum):
    EARLIEST = "earliest"  # the first record still readable (after truncation and retention)
    DLSN = "dlsn"
    TXID = "txid"
    SEQ = "seq"
    TIME = "time"  # write time, ms since the epoch


@dataclass(frozen=True, slots=True)
class Position:
    """Start at the first record whose DLSN / txid / seq / write time is >= `value`."""

    by: By
    value: int | DLSN

    @staticmethod
    def earliest() -> Position:
        return Position(By.EARLIEST, 0)

    def __post_init__(self) -> None:
        if self.by is By.DLSN:
            assert isinstance(self.value, DLSN), self
        elif self.by is By.EARLIEST:
            pass
        elif not isinstance(self.value, int) or self.value < 0:
            raise InvalidRecordError(
                f"position by {self.by.value} is {self.value!r}; expected >= 0"
            )

    def __str__(self) -> str:
        return f"{self.by.value} {self.value}"


def first_active(segments: Sequence[SegmentMetadata]) -> DLSN | None:
    """The first DLSN a reader may start at (after truncation), or None if none is left."""
    for segment in segments:
        if segment.truncation is Truncation.TRUNCATED:
            continue
        if segment.truncation is Truncation.PARTIALLY_TRUNCATED and segment.min_active:
            return segment.min_active
        return segment.first_dlsn
    return None


def check_not_truncated(
    stream: str, start: DLSN, segments: Sequence[SegmentMetadata], max_sequence: int
) -> None:
    """Raises TruncatedPositionError when `start` lies before the first active record.

    `max_sequence` is the highest segment sequence ever allocated: with every segment deleted
    by retention, positions in them are still known to be gone.
    """
    active = first_active(segments)
    if active is None:
        if start.segment <= max_sequence:
            raise TruncatedPositionError(
                f"stream {stream!r}: position {start} is truncated; every segment up to "
                f"{max_sequence} was truncated or deleted, and no record is readable yet"
            )
        return
    if start < active:
        raise TruncatedPositionError(
            f"stream {stream!r}: position {start} is before the first active record {active}; "
            "the records before it were truncated"
        )


def check_seq_not_truncated(
    stream: str, seq: int, found: SegmentMetadata | None, next_seq: int
) -> None:
    """Raises TruncatedPositionError when sequence id `seq` lies in a segment that was
    truncated or deleted: `found` (the first segment holding a record at or after it) starts
    later, or no segment is left although the stream got past `seq` (`next_seq`)."""
    if found is not None and seq < found.first_seq:
        raise TruncatedPositionError(
            f"stream {stream!r}: sequence id {seq} is truncated; the first readable one is "
            f"{found.first_seq} ({found.min_active or found.first_dlsn})"
        )
    if found is None and seq < next_seq:
        raise TruncatedPositionError(
            f"stream {stream!r}: sequence id {seq} is truncated; no record before "
            f"sequence id {next_seq} is readable"
        )


def segment_for(position: Position, segments: Sequence[SegmentMetadata]) -> int | None:
    """The index in `segments` (oldest first) of the segment that holds the first record at or
    after `position`, as far as the metadata tells; None when it lies beyond every segment."""
    for index, segment in enumerate(segments):
        if position.by is not By.DLSN and segment.truncation is Truncation.TRUNCATED:
            continue
        if segment.is_in_progress or position.by is By.EARLIEST:
            return index  # the metadata says nothing beyond this: search inside it
        if position.by is By.DLSN:
            assert isinstance(position.value, DLSN)
            if segment.sequence >= position.value.segment:
                return index
            continue
        value = position.value
        assert isinstance(value, int)
        if segment.record_count == 0:
            continue
        if position.by is By.TXID and segment.last_txid >= value:
            return index
        if position.by is By.SEQ and segment.next_seq > value:
            return index
        if position.by is By.TIME and segment.completed_ms >= value:
            return index
    return None


def start_in_segment(position: Position, segment: SegmentMetadata) -> DLSN | None:
    """The DLSN to start at without searching entries, when the metadata alone tells.

    Positions by txid, seq and time that fall before a partially truncated segment's first
    active record start at that record (by seq, the reader then reports the truncation).
    """
    active = segment.min_active or segment.first_dlsn
    if position.by is By.EARLIEST:
        return active
    if position.by is By.DLSN:
        assert isinstance(position.value, DLSN)
        return max(position.value, segment.first_dlsn)
    value = position.value
    assert isinstance(value, int)
    if position.by is By.SEQ and value <= segment.first_seq:
        return segment.first_dlsn
    if position.by is By.TXID and value <= segment.first_txid:
        return active
    if position.by is By.TIME and value <= segment.created_ms:
        return active
    return None
