"""The one percentile definition of the figures globelog prints: nearest rank, exact at whole
ranks for percentages given in decimal."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from figures.percentiles import percentile

pytestmark = pytest.mark.unit


def test_percentile_is_the_nearest_rank() -> None:
    hundred = [float(v) for v in range(1, 101)]
    assert percentile(hundred, 50) == 50
    assert percentile(hundred, 95) == 95
    assert percentile(hundred, 99) == 99
    assert percentile(hundred, 99.9) == 100  # 99.9 % of 100 samples is rank 99.9 -> 100
    assert percentile(hundred, 100) == 100
    assert percentile([7.0], 50) == 7.0


def test_percentile_has_no_float_error_at_whole_ranks() -> None:
    thousand = [float(v) for v in range(1, 1001)]
    # 99.9 / 100 * 1000 is 999.0000000000001 in floats, which would round up to rank 1000
    assert percentile(thousand, 99.9) == 999
    assert percentile(thousand, 50) == 500


@given(
    st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=300),
    st.sampled_from([1, 50, 95, 99, 99.9, 100]),
)
def test_percentile_has_p_percent_at_or_below_and_fewer_strictly_below(
    samples: list[float], p: float
) -> None:
    ordered = sorted(samples)
    value = percentile(ordered, p)
    assert value in ordered
    at_or_below = sum(1 for v in ordered if v <= value)
    below = sum(1 for v in ordered if v < value)
    assert at_or_below * 100 >= p * len(ordered) - 1e-9
    assert below * 100 < p * len(ordered) + 1e-9


def test_percentile_of_no_samples_is_a_programming_error() -> None:
    with pytest.raises(AssertionError):
        percentile([], 50)
