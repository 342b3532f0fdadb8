"""The data source packs consecutive entry ranges, across segments, into input partitions of
at most entriesPerPartition entries (pipeline/source.py), keeping their order."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.dlsn import DLSN
from core.errors import ConfigError
from pipeline.batch import PIECES_PER_PARTITION, ReadTask, partition_entries
from pipeline.options import parse_source_options
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


TOPOLOGY = str(Path(__file__).resolve().parents[2] / "topology.yaml")


def test_min_partitions_makes_the_entry_bound_smaller_never_larger() -> None:
    options = parse_source_options({"stream": "s", "topology": TOPOLOGY, "minPartitions": "4"})
    bound = partition_entries(options, [task(1, 0, 999)])
    assert bound == 250 + 250 // PIECES_PER_PARTITION
    assert partition_entries(options, [task(1, 0, 2)]) == 1  # fewer entries than partitions
    # The planner then cuts the read into pieces of 250 // 8 entries, segment by segment (here
    # segments of 300, 450 and 250 entries); packed, they make 4 partitions of near-equal size.
    piece = 250 // PIECES_PER_PARTITION
    pieces = [
        task(segment, first, min(first + piece, size) - 1)
        for segment, size in ((1, 300), (2, 450), (3, 250))
        for first in range(0, size, piece)
    ]
    packed = _partitions(pieces, bound)
    sizes = [sum(t.part.entries for t in p.tasks) for p in packed]  # type: ignore[attr-defined]
    assert len(packed) == 4 and sum(sizes) == 1000 and min(sizes[:3]) > 250 - piece
    bounded = parse_source_options(
        {"stream": "s", "topology": TOPOLOGY, "minPartitions": "4", "entriesPerPartition": "100"}
    )
    assert partition_entries(bounded, [task(1, 0, 999)]) == 100


def test_a_bad_min_partitions_is_refused_up_front() -> None:
    with pytest.raises(ConfigError, match="minpartitions"):
        parse_source_options({"stream": "s", "topology": TOPOLOGY, "minPartitions": "0"})
