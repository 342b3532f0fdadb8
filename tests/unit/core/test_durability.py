"""The durability rule: smallest valid ack quorums, region-loss tolerance, window audits."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.durability import (
    ensemble_violations,
    quorum_problems,
    region_losses_survived,
    replication_surviving_a_region,
    smallest_valid_ack_quorum,
    write_set,
)


def test_write_set_is_round_robin() -> None:
    assert write_set(0, 5, 3) == (0, 1, 2)
    assert write_set(4, 5, 3) == (4, 0, 1)
    assert write_set(7, 3, 3) == (1, 2, 0)


# (W, min_regions, regions, globelog's smallest A). BookKeeper's formula (A > W - W // m)
# assumes only m regions exist; globelog uses the regions the topology really has.
CASES = [
    (3, 2, 3, 2),  # BookKeeper rejects 3/3/2 (needs A=3): one copy per region is durable
    (3, 2, 2, 3),  # with two regions the copies split 2+1: BookKeeper's answer
    (15, 2, 2, 9),  # the reference's W=15 example
    (6, 3, 3, 5),  # 2+2+2: two regions hold 4
    (6, 2, 2, 4),
    (6, 2, 3, 3),  # 2+2+2: one region holds 2
    (9, 2, 2, 6),  # the DL doc's 9/9/5 is unsafe with two regions ...
    (9, 2, 3, 4),  # ... and safe with three (3+3+3)
    (2, 3, 3, None),  # two copies cannot span three regions
]


@pytest.mark.parametrize(("w", "m", "regions", "smallest"), CASES)
def test_smallest_valid_ack_quorum(w: int, m: int, regions: int, smallest: int | None) -> None:
    assert smallest_valid_ack_quorum(w, m, regions) == smallest


def brute_force_smallest(w: int, m: int, regions: int) -> int | None:
    """Tries every spread of w copies over the regions; the best spread gives the answer."""
    best: int | None = None
    for spread in itertools.product(range(w + 1), repeat=regions):
        if sum(spread) != w:
            continue
        top = sum(sorted(spread, reverse=True)[: m - 1])
        candidate = top + 1
        if candidate <= w and sum(1 for c in spread if c) >= m:
            best = candidate if best is None else min(best, candidate)
    return best


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 7), st.integers(2, 4), st.integers(1, 4))
def test_smallest_ack_quorum_matches_brute_force(w: int, m: int, regions: int) -> None:
    assert smallest_valid_ack_quorum(w, m, regions) == brute_force_smallest(w, m, regions)


def test_region_losses_survived_counts_bookies_per_region() -> None:
    assert region_losses_survived(3, 3, 2, 2, [2, 2, 2]) == 0  # 2/1 left: 2 acks in one region
    assert region_losses_survived(4, 4, 3, 2, [2, 2, 2]) == 1  # 2/1/1, then 2/2
    assert region_losses_survived(6, 6, 4, 2, [2, 2, 2]) == 0  # 4 bookies left for 6 copies
    assert region_losses_survived(6, 6, 4, 2, [3, 3, 3]) == 1
    assert region_losses_survived(3, 3, 3, 3, [2, 2, 2]) == 0  # 3 regions needed, 2 left
    assert region_losses_survived(4, 4, 2, 2, [2, 2, 2]) == -1  # 2 acks fit in one region


def test_the_suggested_replication_survives_a_region_and_never_waits_for_every_copy() -> None:
    assert replication_surviving_a_region(2, [2, 2, 2]) == (4, 4, 3)
    assert replication_surviving_a_region(2, [1, 1, 1]) is None  # 2 bookies left
    assert replication_surviving_a_region(3, [2, 2, 2]) is None
    for bookies in ([2, 2, 2], [3, 3, 3], [2, 3, 4], [2, 2, 2, 2]):
        e, w, a = replication_surviving_a_region(2, bookies) or (0, 0, 0)
        assert a < w and region_losses_survived(e, w, a, 2, bookies) >= 1


def test_quorum_problems_explain_the_fix() -> None:
    assert quorum_problems(3, 3, 2, 2, 3) == []
    [problem] = quorum_problems(3, 3, 1, 2, 3)
    assert "the smallest valid ack_quorum is 2" in problem
    [problem] = quorum_problems(2, 2, 2, 3, 3)
    assert "write_quorum must be >= 3" in problem
    [problem] = quorum_problems(3, 4, 2, 2, 3)
    assert "need 1 <= ack_quorum <= write_quorum <= ensemble_size" in problem


def test_ensemble_violations_checks_every_window() -> None:
    # E=4, W=3, A=2, m=2 over three regions: the window (2, 3, 0) holds two copies in "a".
    regions = ["a", "b", "c", "a"]
    found = ensemble_violations(regions, 3, 2, 2)
    assert [v.positions for v in found] == [(2, 3, 0), (3, 0, 1)]
    assert "a=2" in found[0].describe(2, 2)
    assert ensemble_violations(["a", "b", "c", "a", "b", "c"], 3, 2, 2) == []
    assert ensemble_violations(["a", "a", "b"], 3, 2, 2) != []
