"""How a producer table's rebuild splits its scan over readers (region/idempotence/rebuild.py
`_runs`): runs of whole segments, the first from the scan's start, together covering the scan
once, at most as many as asked for."""

from __future__ import annotations

import itertools
import random

import pytest

from core.segments import SegmentMetadata, SegmentState
from global_meta.streams import VersionedSegment
from region.idempotence.rebuild import _runs


def segments(sizes: list[int]) -> list[VersionedSegment]:
    """Completed segments of these record counts, one after the other from seq 0."""
    made, first = [], 0
    for sequence, size in enumerate(sizes, start=1):
        segment = SegmentMetadata(
            sequence=sequence,
            ledger_id=sequence,
            state=SegmentState.COMPLETED,
            first_txid=0,
            first_seq=first,
            created_ms=0,
            writer_region="us-east",
            record_count=size,
        )
        made.append(VersionedSegment(segment, 1))
        first += size
    return made


def test_equal_segments_are_split_evenly() -> None:
    assert _runs(segments([100] * 8), 0, 800, 4) == [(0, 200), (200, 400), (400, 600), (600, 800)]


def test_fewer_segments_than_readers_are_read_one_each() -> None:
    assert _runs(segments([10, 500, 20]), 0, 530, 4) == [(0, 10), (10, 510), (510, 530)]


def test_a_scan_from_inside_a_segment_starts_its_first_run_there() -> None:
    assert _runs(segments([100] * 4), 150, 400, 4) == [(150, 200), (200, 300), (300, 400)]


def test_one_segment_or_one_reader_is_one_run() -> None:
    assert _runs(segments([500]), 0, 500, 4) == [(0, 500)]
    assert _runs(segments([100] * 4), 0, 400, 1) == [(0, 400)]
    assert _runs([], 0, 10, 4) == [(0, 10)]


@pytest.mark.parametrize("seed", range(200))
def test_runs_cover_the_scan_once_at_segment_starts(seed: int) -> None:
    choices = random.Random(seed)
    made = segments([choices.choice([0, 1, 5, 50, 300]) for _ in range(choices.randint(1, 30))])
    total = made[-1].segment.next_seq
    start = choices.randint(0, total)
    upto = choices.randint(start, total) if choices.random() < 0.3 else total
    most = choices.randint(1, 8)
    runs = _runs(made, start, upto, most)
    assert 1 <= len(runs) <= most
    assert runs[0][0] == start and runs[-1][1] == upto
    assert all(a[1] == b[0] for a, b in itertools.pairwise(runs))  # no gap, no overlap
    assert all(low < high for low, high in runs) or runs == [(start, upto)]
    firsts = {v.segment.first_seq for v in made}
    assert all(low in firsts for low, _ in runs[1:]), "later runs start at a segment's start"
