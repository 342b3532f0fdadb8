"""LogWriterState.write_batch: a bulk write accepted in one call behaves as the same records
written one by one (entries, txids, positions), and check_batch refuses a bad batch whole."""

from __future__ import annotations

import pytest

from core.errors import RecordTooLargeError, TxidOutOfOrderError
from core.records import ENTRY_RECORDS_BYTES_MAX, RECORD_BYTES_MAX, Record
from core.streams import StreamSettings
from writer.events import (
    CompleteWrites,
    EntryAcked,
    RollSegment,
    SegmentStarted,
    Ticked,
    TransmitEntry,
)
from writer.state import LogWriterState, SegmentStart

pytestmark = pytest.mark.unit

NOW_MS = 1_700_000_000_000


def machine(**settings: object) -> LogWriterState:
    base = StreamSettings(**{"buffer_bytes": 1000, **settings})  # type: ignore[arg-type]
    return LogWriterState("s", base, SegmentStart(1, 0, -1), now_s=0.0)


def transmits(state: LogWriterState) -> list[TransmitEntry]:
    return [a for a in state.take_actions() if isinstance(a, TransmitEntry)]


def test_a_batch_fills_entries_as_single_writes_would() -> None:
    records = [b"x" * 100] * 25
    one_by_one, batched = machine(), machine()
    for payload in records:
        one_by_one.write(Record(payload), NOW_MS)
    assert batched.write_batch(records, NOW_MS) == 0
    one_by_one.flush()
    batched.flush()
    expected = [(t.first_position, t.records) for t in transmits(one_by_one)]
    assert [(t.first_position, t.records) for t in transmits(batched)] == expected
    assert [len(r) for _, r in expected] == [10, 10, 5]  # 1000 bytes an entry


def test_txids_assigned_in_a_batch_never_go_below_a_given_one() -> None:
    state = machine()
    state.write_batch([Record(b"a", txid=NOW_MS + 50), b"b", Record(b"c")], NOW_MS)
    state.flush()
    (entry,) = transmits(state)
    assert [r.txid for r in entry.records] == [NOW_MS + 50] * 3
    assert state.last_txid == NOW_MS + 50


def test_acks_of_a_batch_complete_its_write_ids_in_order_with_dense_sequence_ids() -> None:
    state = machine()
    first = state.write_batch([b"r%d" % i for i in range(12)], NOW_MS)
    state.flush()
    entries = transmits(state)
    completed: list[int] = []
    seqs: list[int] = []
    for entry_id, entry in enumerate(entries):
        state.handle(EntryAcked(entry.transmit_id, entry_id))
        for action in state.take_actions():
            if isinstance(action, CompleteWrites):
                completed += [write_id for write_id, _ in action.results]
                seqs += [written.seq for _, written in action.results]
    assert completed == list(range(first, first + 12))
    assert seqs == list(range(12))
    assert state.pending_writes == 0


def test_check_batch_names_the_first_bad_record_and_accepts_nothing() -> None:
    state = machine()
    with pytest.raises(RecordTooLargeError, match="record 1 of the batch"):
        state.check_batch([b"ok", b"x" * (RECORD_BYTES_MAX + 1)])
    with pytest.raises(TxidOutOfOrderError, match="record 1 of the batch has txid 5"):
        state.check_batch([Record(b"a", txid=9), Record(b"b", txid=5)])
    assert state.pending_writes == 0 and not state.has_actions


def test_an_explicit_txid_below_the_time_does_not_pull_later_assigned_ones_down() -> None:
    state = machine()
    state.write_batch([Record(b"a", txid=5), b"b", Record(b"c", txid=NOW_MS + 9), b"d"], NOW_MS)
    state.flush()
    (entry,) = transmits(state)
    assert [r.txid for r in entry.records] == [5, NOW_MS, NOW_MS + 9, NOW_MS + 9]


def test_writes_buffered_while_a_segment_rolls_go_out_as_entries_within_the_entry_limit() -> None:
    """More than one entry's worth accepted during a roll is not sent as one oversized entry."""
    state = machine(segment_roll_s=10.0, buffer_bytes=64 * 1024)
    state.write(Record(b"first"), NOW_MS)
    state.flush()
    (first,) = transmits(state)
    state.handle(EntryAcked(first.transmit_id, 0))
    state.handle(Ticked(20.0))  # the segment is old: a control record, then the roll
    (control,) = transmits(state)
    state.handle(EntryAcked(control.transmit_id, 1))
    assert any(isinstance(a, RollSegment) for a in state.take_actions())
    payload = b"x" * 1000
    count = 3 * ENTRY_RECORDS_BYTES_MAX // len(payload)
    first_id = state.write_batch([payload] * count, NOW_MS)
    assert transmits(state) == []  # held while the roll is under way
    state.handle(SegmentStarted(2, 1, 20.0))
    state.flush()
    entries = transmits(state)
    assert len(entries) >= 3
    assert all(sum(len(r.payload) for r in e.records) <= ENTRY_RECORDS_BYTES_MAX for e in entries)
    starts = [sum(len(e.records) for e in entries[:i]) for i in range(len(entries))]
    assert [e.first_position for e in entries] == starts  # positions restart in the segment
    completed: list[int] = []
    for entry_id, entry in enumerate(entries):
        state.handle(EntryAcked(entry.transmit_id, entry_id))
        for action in state.take_actions():
            if isinstance(action, CompleteWrites):
                completed += [write_id for write_id, _ in action.results]
    assert completed == list(range(first_id, first_id + count))
    assert state.pending_writes == 0
