"""The data source packs consecutive entry ranges, across segments, into input partitions of
at most entriesPerPartition entries (pipeline/source.py), keeping their order."""

from __future__ import annotations

from core.dlsn import DLSN
from pipeline.batch import ReadTask
from pipeline.source import RangePartition, _partitions
from reader.ranges import EntryRange


def task(segment: int, first: int, last: int) -> ReadTask:
    part = EntryRange("s", segment, 100 + segment, first, last, 0, DLSN(segment, first, 0), None)
    return ReadTask("topology.yaml", "us-east", "default", part)


def shapes(tasks: list[ReadTask], limit: int) -> list[list[tuple[int, int]]]:
    packed = _partitions(tasks, limit)
    assert all(isinstance(p, RangePartition) for p in packed)
    return [[(t.part.segment, t.part.first_entry) for t in p.tasks] for p in packed]  # type: ignore[attr-defined]


def test_ranges_are_packed_in_order_up_to_the_entry_bound() -> None:
    tasks = [task(1, 0, 99), task(1, 100, 149), task(2, 0, 79), task(3, 0, 199), task(4, 0, 9)]
    assert shapes(tasks, 200) == [[(1, 0), (1, 100)], [(2, 0)], [(3, 0)], [(4, 0)]]
    assert shapes(tasks, 250) == [[(1, 0), (1, 100), (2, 0)], [(3, 0), (4, 0)]]
    assert shapes(tasks, 10_000) == [[(1, 0), (1, 100), (2, 0), (3, 0), (4, 0)]]


def test_a_bound_of_one_entry_keeps_every_range_apart() -> None:
    tasks = [task(1, e, e) for e in range(5)]
    assert len(_partitions(tasks, 1)) == 5


def test_no_range_is_one_empty_partition() -> None:
    packed = _partitions([], 2048)
    assert len(packed) == 1 and not isinstance(packed[0], RangePartition)
