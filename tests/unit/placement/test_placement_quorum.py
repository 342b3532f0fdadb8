"""BookKeeper's quorum check (docs/placement.md), beside what globelog computes per region count.

BookKeeper's argument check needs A > W - floor(W / m): the worst case where only m regions
are left. globelog judges the regions that exist, so with more regions than m it accepts
smaller ack quorums; with exactly m regions both rules agree.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import GlobelogError, QuorumError
from core.topology import Replication
from placement import QuorumSettingsError, check_quorum

pytestmark = pytest.mark.unit


def bk_smallest_ack(write_quorum: int, min_regions: int) -> int:
    """BookKeeper REPP: rejects A <= W - floor(W / m), so the smallest accepted A is one more."""
    return write_quorum - write_quorum // min_regions + 1


def smallest_accepted_ack(write_quorum: int, min_regions: int, regions: int) -> int | None:
    for ack in range(1, write_quorum + 1):
        try:
            check_quorum(Replication(write_quorum, write_quorum, ack, min_regions), regions)
        except QuorumSettingsError:
            continue
        return ack
    return None


@pytest.mark.parametrize(
    ("write_quorum", "min_regions", "bk_needs"),
    [(3, 2, 3), (15, 2, 9), (6, 3, 5), (6, 2, 4), (9, 2, 6)],
)
def test_bookkeeper_examples_match_exactly_when_only_min_regions_regions_exist(
    write_quorum: int, min_regions: int, bk_needs: int
) -> None:
    assert bk_smallest_ack(write_quorum, min_regions) == bk_needs  # the reference's numbers
    assert smallest_accepted_ack(write_quorum, min_regions, regions=min_regions) == bk_needs


@pytest.mark.parametrize(
    ("write_quorum", "min_regions", "regions", "globelog_needs", "bk_needs"),
    [
        (3, 2, 3, 2, 3),  # 3/3/2 over 3 regions: one copy each, any 2 acks span 2 regions
        (15, 2, 3, 6, 9),  # 5 copies per region: 6 acks cannot fit in one region
        (6, 3, 3, 5, 5),  # 2 per region: 2 regions hold 4, so 5 acks span 3 (same as BK)
        (6, 3, 6, 3, 5),  # one copy per region: 3 acks always span 3 regions
        (6, 2, 3, 3, 4),  # 2 per region: 3 acks cannot fit in one region
        (9, 2, 3, 4, 6),  # 3 per region: the DL doc's 9/9/5 is accepted here
    ],
)
def test_globelog_accepts_smaller_ack_quorums_than_bookkeeper_when_more_regions_exist(
    write_quorum: int, min_regions: int, regions: int, globelog_needs: int, bk_needs: int
) -> None:
    assert bk_smallest_ack(write_quorum, min_regions) == bk_needs
    assert smallest_accepted_ack(write_quorum, min_regions, regions) == globelog_needs


def test_3_3_2_over_three_regions_is_accepted_although_bookkeeper_rejects_it_issue_4553() -> None:
    check_quorum(Replication(3, 3, 2, 2), regions=3)  # does not raise


def test_3_3_2_over_two_regions_is_rejected_and_says_the_smallest_valid_ack_quorum() -> None:
    with pytest.raises(QuorumSettingsError) as caught:
        check_quorum(Replication(3, 3, 2, 2), regions=2)
    error = caught.value
    assert error.smallest_ack_quorum == 3
    assert "the smallest valid ack_quorum is 3" in str(error)
    assert "[2, 1]" in str(error)  # why: the most even spread still puts 2 copies in a region


def test_dl_doc_9_9_5_is_rejected_over_two_regions_like_bookkeeper_and_asks_for_6() -> None:
    with pytest.raises(QuorumSettingsError) as caught:
        check_quorum(Replication(9, 9, 5, 2), regions=2)
    assert caught.value.smallest_ack_quorum == 6


def test_quorum_error_is_a_non_retriable_quorum_config_error() -> None:
    with pytest.raises(QuorumError) as caught:
        check_quorum(Replication(3, 3, 1, 2), regions=3)
    error = caught.value
    assert isinstance(error, GlobelogError)
    assert error.code == "quorum_invalid"
    assert error.retriable is False


@pytest.mark.parametrize(
    ("replication", "regions", "expected"),
    [
        (Replication(3, 4, 2, 2), 3, "ack_quorum <= write_quorum <= ensemble_size"),
        (Replication(3, 3, 2, 4), 3, "only 3 region(s)"),
        (Replication(3, 1, 1, 2), 3, "write_quorum must be >= 2"),
        (Replication(3, 3, 2, 0), 3, "must be >= 1"),
    ],
)
def test_malformed_settings_name_the_rule_they_break(
    replication: Replication, regions: int, expected: str
) -> None:
    with pytest.raises(QuorumSettingsError, match=re.escape(expected)):
        check_quorum(replication, regions)


def test_striping_5_3_2_over_three_regions_is_rejected_although_one_write_set_would_fit() -> None:
    # A single write set of 3 copies fits one per region, but 5 positions striped round-robin
    # over 3 regions always put one region twice into some write set.
    with pytest.raises(QuorumSettingsError) as caught:
        check_quorum(Replication(5, 3, 2, 2), regions=3)
    message = str(caught.value)
    assert caught.value.smallest_ack_quorum == 3
    assert "ensemble_size=3 keeps ack_quorum=2 valid" in message
    assert "round-robin striping" in message


def test_striping_6_3_2_over_three_regions_is_accepted() -> None:
    check_quorum(Replication(6, 3, 2, 2), regions=3)  # a b c a b c: every window spans 3


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20), st.integers(1, 5))
def test_with_exactly_min_regions_regions_globelog_equals_bookkeepers_formula(
    write_quorum: int, min_regions: int
) -> None:
    if write_quorum < min_regions:
        assert smallest_accepted_ack(write_quorum, min_regions, min_regions) is None
    else:
        expected = bk_smallest_ack(write_quorum, min_regions)
        assert smallest_accepted_ack(write_quorum, min_regions, min_regions) == expected
