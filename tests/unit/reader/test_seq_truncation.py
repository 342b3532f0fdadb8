"""A position by sequence id inside a truncated or deleted segment is refused, not skipped."""

from __future__ import annotations

import pytest

from core.dlsn import DLSN
from core.errors import TruncatedPositionError
from core.segments import SegmentMetadata, SegmentState, Truncation
from reader.positions import By, Position, check_seq_not_truncated, segment_for

pytestmark = pytest.mark.unit


def completed(
    sequence: int, first_seq: int, count: int, truncated: bool = False
) -> SegmentMetadata:

    return SegmentMetadata(
        sequence=sequence,
        ledger_id=sequence,
        state=SegmentState.COMPLETED,
        first_txid=0,
        first_seq=first_seq,
        created_ms=0,
        writer_region="us-east",
        last_txid=10,
        last_dlsn=DLSN(sequence, count - 1, 0),
        record_count=count,
        completed_ms=1,
        truncation=Truncation.TRUNCATED if truncated else Truncation.ACTIVE,
    )


SEGMENTS = [completed(1, 0, 10, truncated=True), completed(2, 10, 10)]


def found(seq: int) -> SegmentMetadata | None:
    index = segment_for(Position(By.SEQ, seq), SEGMENTS)
    return None if index is None else SEGMENTS[index]


def test_a_sequence_id_in_a_truncated_segment_is_refused_with_the_first_readable_one() -> None:
    with pytest.raises(TruncatedPositionError, match=r"sequence id 4 is truncated.*is 10"):
        check_seq_not_truncated("s", 4, found(4), next_seq=20)


def test_a_readable_sequence_id_passes() -> None:
    check_seq_not_truncated("s", 10, found(10), next_seq=20)
    check_seq_not_truncated("s", 15, found(15), next_seq=20)
    check_seq_not_truncated("s", 25, found(25), next_seq=20)  # beyond the end: waits for it


def test_with_every_segment_gone_an_old_sequence_id_is_refused() -> None:
    with pytest.raises(TruncatedPositionError, match="no record before sequence id 20"):
        check_seq_not_truncated("s", 3, None, next_seq=20)
