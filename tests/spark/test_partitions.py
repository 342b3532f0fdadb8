"""The data source cuts a read's entry ranges, across segments, into input partitions of
near-equal size (pipeline/batch.py `pack`), in stream order, every entry in exactly one."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.dlsn import DLSN
from core.errors import ConfigError
from pipeline.batch import ReadTask, pack
from pipeline.options import parse_source_options
from pipeline.source import RangePartition, _partitions
from reader.ranges import EntryRange, split_range


def task(segment: int, first: int, last: int) -> ReadTask:
    part = EntryRange("s", segment, 100 + segment, first, last, 0, DLSN(segment, first, 0), None)
    return ReadTask("topology.yaml", "us-east", "default", part)


def entries(tasks: list[ReadTask]) -> list[tuple[int, int]]:
    """(segment, entry) of every entry of the tasks, in order."""
    return [
        (t.part.segment, e) for t in tasks for e in range(t.part.first_entry, t.part.last_entry + 1)
    ]


def sizes(groups: list[list[ReadTask]]) -> list[int]:
    return [sum(t.part.entries for t in group) for group in groups]


def test_ranges_are_cut_into_equal_partitions_in_order() -> None:
    tasks = [task(1, 0, 99), task(1, 100, 149), task(2, 0, 79), task(3, 0, 199), task(4, 0, 9)]
    # 440 entries, at most 200 a partition: 3 partitions, 4 to be a multiple of 2 cores
    assert sizes(pack(tasks, 200, 1)) == [147, 146, 147]
    assert sizes(pack(tasks, 200, 2)) == [110, 110, 110, 110]
    assert sizes(pack(tasks, 10_000, 2)) == [220, 220]
    packed = pack(tasks, 10_000, 1)
    assert packed == [tasks]  # nothing to cut: the ranges as planned


def test_a_range_is_cut_where_a_partition_ends() -> None:
    first, second = pack([task(1, 0, 9)], 5, 1)
    assert [(t.part.first_entry, t.part.last_entry) for t in first + second] == [(0, 4), (5, 9)]
    assert all(t.part.start == DLSN(1, 0, 0) and t.part.end is None for t in first + second)


def test_fewer_entries_than_cores_make_a_partition_per_entry() -> None:
    assert sizes(pack([task(1, 0, 2)], 2048, 8)) == [1, 1, 1]


def test_no_range_is_one_empty_partition() -> None:
    assert pack([], 2048, 2) == []
    packed = _partitions([], 2048, 2)
    assert len(packed) == 1 and not isinstance(packed[0], RangePartition)


@given(
    st.lists(st.integers(1, 300), min_size=1, max_size=12),
    st.integers(1, 500),
    st.integers(1, 8),
)
def test_every_entry_once_in_order_in_equal_bounded_partitions(
    lengths: list[int], bound: int, cores: int
) -> None:
    tasks = [task(segment, 0, n - 1) for segment, n in enumerate(lengths, start=1)]
    groups = pack(tasks, bound, cores)
    assert entries([t for g in groups for t in g]) == entries(tasks)
    total = sum(lengths)
    assert max(sizes(groups)) <= bound and max(sizes(groups)) - min(sizes(groups)) <= 1
    if len(groups) < total:  # else one entry each: there are fewer entries than that
        assert len(groups) % cores == 0
        fewer = len(groups) - cores  # the multiple of the cores below could not keep the bound
        assert fewer == 0 or -(-total // fewer) > bound


def test_split_range_keeps_what_the_range_delivers() -> None:
    part = EntryRange("s", 2, 7, 10, 19, 500, DLSN(2, 11, 3), DLSN(2, 19, 1))
    head, rest = split_range(part, 4)
    assert (head.first_entry, head.last_entry) == (10, 13)
    assert rest is not None and (rest.first_entry, rest.last_entry) == (14, 19)
    assert {head.start, rest.start} == {DLSN(2, 11, 3)} and {head.end, rest.end} == {DLSN(2, 19, 1)}
    assert head.first_seq == rest.first_seq == 500
    assert split_range(part, 10) == (part, None) and split_range(part, 99) == (part, None)


TOPOLOGY = str(Path(__file__).resolve().parents[2] / "topology.yaml")


def test_a_bad_min_partitions_is_refused_up_front() -> None:
    with pytest.raises(ConfigError, match="minpartitions"):
        parse_source_options({"stream": "s", "topology": TOPOLOGY, "minPartitions": "0"})
