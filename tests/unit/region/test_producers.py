"""The idempotent-write table: retries answered from memory, stale seqs refused, bounded."""

from __future__ import annotations

import pytest

from core.dlsn import DLSN
from core.errors import ProducerSeqStaleError
from region.idempotence.producers import ProducerTable, check_producer
from writer.events import Written


def landed(seq: int) -> Written:
    return Written(DLSN(1, seq, 0), 1000 + seq, seq)


def test_a_written_seq_is_answered_with_where_it_landed() -> None:
    table = ProducerTable()
    assert table.lookup(7, 0) is None
    table.record(7, 0, landed(0))
    assert table.lookup(7, 0) == landed(0)
    assert table.lookup(7, 1) is None
    assert table.lookup(8, 0) is None, "producers are independent"


def test_a_gap_inside_the_window_can_still_be_written() -> None:
    table = ProducerTable(window=8)
    table.record(7, 5, landed(5))
    assert table.lookup(7, 3) is None, "seq 3 never landed: its retry is written"
    table.record(7, 3, landed(3))
    assert table.lookup(7, 3) == landed(3)
    assert table.lookup(7, 5) == landed(5)


def test_a_seq_older_than_the_window_is_refused_not_rewritten() -> None:
    table = ProducerTable(window=4)
    for seq in range(10):
        table.record(7, seq, landed(seq))
    assert table.lookup(7, 6) == landed(6)
    with pytest.raises(ProducerSeqStaleError, match=r"seq 5 is older than its last 4 writes"):
        table.lookup(7, 5)
    with pytest.raises(ProducerSeqStaleError):
        table.lookup(7, 0)


def test_the_least_recently_seen_producer_is_forgotten_first() -> None:
    table = ProducerTable(producers_max=2)
    table.record(1, 0, landed(0))
    table.record(2, 0, landed(1))
    table.record(1, 1, landed(2))  # producer 1 seen again: producer 2 is now the oldest
    table.record(3, 0, landed(3))
    assert len(table) == 2
    assert table.lookup(2, 0) is None
    assert table.lookup(1, 1) == landed(2)


@pytest.mark.parametrize(
    ("producer", "seq", "message"),
    [(-1, 0, "producer id -1"), (1 << 64, 0, "producer id"), (1, -1, "producer seq -1")],
)
def test_out_of_range_numbers_are_named(producer: int, seq: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_producer(producer, seq)


def test_the_last_seq_of_a_producer_is_its_highest_landed_one() -> None:
    table = ProducerTable(window=4)
    assert table.last_seq(9) is None
    for seq in (0, 1, 3, 2):
        table.record(9, seq, Written(DLSN(1, seq, 0), seq, seq))
    assert table.last_seq(9) == 3
