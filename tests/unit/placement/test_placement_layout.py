"""The region layout search and the rack choice inside a region."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.durability import ensemble_violations
from core.topology import Replication
from placement import LocatedBookie
from placement.layout import even_fill, find_layout, region_targets
from placement.racks import (
    choose_in_region,
    fill_racks,
    most_even_max,
    rack_spread_holds,
    rotated,
)

pytestmark = pytest.mark.unit


def test_even_fill_raises_the_lowest_counts_within_bounds() -> None:
    assert even_fill([3, 0, 1], [9, 9, 9], 3) == [3, 2, 2]
    assert even_fill([0, 0], [1, 5], 4) == [1, 3]
    assert even_fill([0, 0], [1, 1], 3) is None


def test_region_targets_split_evenly_with_extras_to_the_preferred_regions() -> None:
    targets = region_targets(5, {"east": 9, "west": 9, "eu": 9}, ["west", "east", "eu"])
    assert targets == {"west": 2, "east": 2, "eu": 1}
    assert region_targets(5, {"east": 1, "west": 9}, ["east", "west"]) == {"east": 1, "west": 4}


def test_layout_interleaves_regions_with_the_preferred_one_first() -> None:
    capacities = {"east": 2, "west": 2, "eu": 2}
    result = find_layout(Replication(6, 3, 2, 2), capacities, ["west", "east", "eu"])
    assert result.regions == ("west", "east", "eu", "west", "east", "eu")
    assert result.steps == 6  # the greedy path needed no backtracking


def test_layout_backtracks_when_the_interleaving_breaks_a_window() -> None:
    # E=4, W=2, A=2, m=2: neighbours must differ, cyclically. The even interleaving
    # a,b,c,a puts a next to a across the wrap; the search backs up and finds a,b,a,c.
    capacities = {"a": 2, "b": 1, "c": 2}
    result = find_layout(Replication(4, 2, 2, 2), capacities, ["a", "b", "c"])
    assert result.regions == ("a", "b", "a", "c")
    assert result.steps > 4


def test_layout_skips_the_preferred_region_only_when_no_layout_can_use_it() -> None:
    # W=E=2, A=2, m=2 over {east, west, eu}: east (preferred) has one bookie and is used.
    result = find_layout(
        Replication(2, 2, 2, 2), {"east": 1, "west": 1, "eu": 1}, ["east", "west", "eu"]
    )
    assert result.regions == ("east", "west")


def test_layout_reports_none_when_capacity_cannot_separate_copies() -> None:
    result = find_layout(Replication(4, 2, 2, 2), {"east": 4, "west": 1}, ["east", "west"])
    assert result.regions is None
    assert not result.exhausted


def test_layout_search_says_when_it_stopped_at_its_bound() -> None:
    result = find_layout(
        Replication(11, 5, 4, 3),
        {"a": 4, "b": 5, "c": 5, "d": 4},
        ["a", "b", "c", "d"],
        steps_max=10,
    )
    assert result.regions is None
    assert result.exhausted
    assert result.steps == 10


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 7).flatmap(
        lambda e: st.tuples(st.just(e), st.integers(1, e)).flatmap(
            lambda ew: st.tuples(
                st.just(ew[0]), st.just(ew[1]), st.integers(1, ew[1]), st.integers(1, 3)
            )
        )
    ),
    st.lists(st.integers(0, 4), min_size=1, max_size=4),
)
def test_layout_is_complete_against_brute_force(
    settings_: tuple[int, int, int, int], capacity_list: list[int]
) -> None:
    size, write, ack, min_regions = settings_
    names = [f"r{i}" for i in range(len(capacity_list))]
    capacities = dict(zip(names, capacity_list, strict=True))
    result = find_layout(Replication(size, write, ack, min_regions), capacities, names)
    assert not result.exhausted
    exists = any(
        all(labels.count(r) <= capacities[r] for r in names)
        and not ensemble_violations(labels, write, ack, min_regions)
        for labels in itertools.product(names, repeat=size)
    )
    assert (result.regions is not None) == exists
    if result.regions is not None:
        assert not ensemble_violations(result.regions, write, ack, min_regions)


def test_rotated_moves_the_first_item_to_the_front() -> None:
    assert rotated(["a", "b", "c"], 1) == ["b", "c", "a"]
    assert rotated(["a", "b", "c"], 1, first="c") == ["c", "b", "a"]
    assert rotated([], 3) == []


def test_rack_fill_and_the_most_even_maximum() -> None:
    assert fill_racks({"a": 1, "b": 3, "c": 3}, 5, ["a", "b", "c"]) == {"a": 1, "b": 2, "c": 2}
    assert most_even_max({"a": 1, "b": 3, "c": 3}, 5) == 2
    assert rack_spread_holds(["a", "b", "c", "b", "c"], {"a": 1, "b": 3, "c": 3})
    assert not rack_spread_holds(["b", "b", "b", "c", "a"], {"a": 1, "b": 3, "c": 3})
    assert not rack_spread_holds(["b", "b"], {"a": 1, "b": 3})  # rack a was free


def test_choose_in_region_starts_on_the_writer_rack_and_alternates_racks() -> None:
    bookies = [LocatedBookie(f"{rack}{n}", "east", rack) for rack in "abc" for n in range(2)]
    chosen = choose_in_region(bookies, 5, first_rack="c", rotation=0, avoid=frozenset())
    racks = [b.rack for b in chosen]
    assert racks.count("c") == 2
    assert sorted(racks) == ["a", "a", "b", "c", "c"]
    assert all(racks[i] != racks[i + 1] for i in range(len(racks) - 1))
    assert racks[0] == "c"
