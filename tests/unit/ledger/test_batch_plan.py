"""How a range of entries is cut into batched reads: inside one ensemble, bounded in size."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ledger.drivers.batch_reads import plan_batches


def test_a_range_inside_one_ensemble_is_cut_by_the_entry_bound() -> None:
    assert plan_batches([0], 5, 14, entries_max=4) == [(5, 8), (9, 12), (13, 14)]


def test_batches_never_cross_an_ensemble_change() -> None:
    assert plan_batches([0, 10, 12], 8, 20, entries_max=100) == [(8, 9), (10, 11), (12, 20)]


def test_one_entry_is_one_batch() -> None:
    assert plan_batches([0, 3], 3, 3) == [(3, 3)]


@given(
    st.lists(st.integers(1, 300), max_size=5, unique=True).map(lambda f: [0, *sorted(f)]),
    st.integers(0, 400),
    st.integers(0, 400),
    st.integers(1, 50),
)
def test_batches_cover_the_range_once_in_order(
    firsts: list[int], first: int, length: int, entries_max: int
) -> None:
    last = first + length
    batches = plan_batches(firsts, first, last, entries_max)
    covered = [e for low, high in batches for e in range(low, high + 1)]
    assert covered == list(range(first, last + 1))
    for low, high in batches:
        assert high - low + 1 <= entries_max
        # the same ensemble holds both ends
        assert sum(f <= low for f in firsts) == sum(f <= high for f in firsts)
