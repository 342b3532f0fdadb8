"""The columnar entry decoder (the Spark data source's) agrees with the record decoder on every
entry, and refuses exactly the bytes the record decoder refuses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.entry_format import (
    Codec,
    as_log_record,
    decode_entry,
    decode_entry_columns,
    encode_entry,
    log_records,
)
from core.errors import EntryFormatError
from core.records import RecordFlag, StoredRecord, producer_payload
from pipeline.batch import entry_arrays

pytestmark = pytest.mark.unit

PLAIN = st.builds(
    StoredRecord, st.integers(0, 1 << 40), st.just(RecordFlag.NONE), st.binary(max_size=40)
)
CONTROL = st.builds(
    StoredRecord, st.integers(0, 1 << 40), st.just(RecordFlag.CONTROL), st.just(b"")
)
PRODUCED = st.builds(
    lambda txid, producer, seq, payload: StoredRecord(
        txid, RecordFlag.PRODUCER, producer_payload(producer, seq, payload)
    ),
    st.integers(0, 1 << 40),
    st.integers(0, (1 << 64) - 1),
    st.integers(0, (1 << 63) - 1),
    st.binary(max_size=20),
)
RECORDS = st.lists(st.one_of(PLAIN, PLAIN, CONTROL, PRODUCED), min_size=1, max_size=30)


def body(records: list[StoredRecord], codec: Codec, eos: bool = False) -> bytes:
    if eos:
        records = [*records, StoredRecord(0, RecordFlag.END_OF_STREAM, b"")]
    return encode_entry(
        records, first_position=5, write_time_ms=1_700_000_000_123, region="eu-west", codec=codec
    )


@given(RECORDS, st.sampled_from(Codec), st.booleans())
def test_columns_hold_the_same_user_records_as_the_record_decoder(
    records: list[StoredRecord], codec: Codec, eos: bool
) -> None:
    data = body(records, codec, eos)
    entry = decode_entry(data, "e")
    expected = [
        as_log_record(record, dlsn, seq, entry)
        for dlsn, record, seq in log_records(entry, 2, 9, 100)
        if not record.flags & (RecordFlag.CONTROL | RecordFlag.END_OF_STREAM)
    ]
    columns = decode_entry_columns(data, "e")
    assert columns.head.first_position == 5 and columns.head.region == "eu-west"
    assert columns.head.write_time_ms == 1_700_000_000_123
    assert columns.slots == [r.dlsn.slot for r in expected]
    assert columns.txids == [r.txid for r in expected]
    assert columns.payloads == [r.payload for r in expected]
    producers = [(i, r.producer_id, r.producer_seq) for i, r in enumerate(expected)]
    assert columns.producers == [p for p in producers if p[1] is not None]
    assert columns.sealed == eos


@given(RECORDS, st.data())
def test_corrupt_bytes_are_refused_by_both_decoders_alike(
    records: list[StoredRecord], data: st.DataObject
) -> None:
    good = bytearray(body(records, Codec.NONE))
    at = data.draw(st.integers(0, len(good) - 1))
    good[at] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(good)))
    damaged = bytes(good[:cut])
    try:
        decode_entry(damaged, "e")
    except EntryFormatError as refused:
        with pytest.raises(EntryFormatError) as also:
            decode_entry_columns(damaged, "e")
        assert str(also.value) == str(refused)
    else:
        decode_entry_columns(damaged, "e")


# ------------------------------------- the data source's numpy columns (pipeline/batch.py)


def as_lists(data: bytes) -> tuple[list[int], list[int], list[bytes], list[tuple[int, int, int]]]:
    """entry_arrays' columns in decode_entry_columns' shapes."""
    _, arrays = entry_arrays(data, "e")
    payloads = [
        bytes(arrays.values[arrays.offsets[i] : arrays.offsets[i + 1]])
        for i in range(len(arrays.lengths))
    ]
    producers = [
        (i, int(arrays.producer_ids[i]) % (1 << 64), int(arrays.producer_seqs[i]))
        for i in range(len(arrays.lengths))
        if arrays.producer_set[i]
    ]
    assert arrays.values.size == sum(len(p) for p in payloads)
    return arrays.slots.tolist(), arrays.txids.tolist(), payloads, producers


@given(RECORDS, st.sampled_from(Codec), st.booleans())
def test_numpy_columns_equal_the_columnar_decoder(
    records: list[StoredRecord], codec: Codec, eos: bool
) -> None:
    data = body(records, codec, eos)
    columns = decode_entry_columns(data, "e")
    expected = (columns.slots, columns.txids, columns.payloads, columns.producers)
    assert as_lists(data) == expected


@given(RECORDS, st.data())
def test_corrupt_bytes_are_refused_by_the_numpy_columns_alike(
    records: list[StoredRecord], data: st.DataObject
) -> None:
    good = bytearray(body(records, Codec.NONE))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(good) - 1))
        good[at] ^= data.draw(st.integers(1, 255))
    damaged = bytes(good[: data.draw(st.integers(len(good) // 2, len(good)))])
    try:
        columns = decode_entry_columns(damaged, "e")
    except EntryFormatError as refused:
        with pytest.raises(EntryFormatError) as also:
            entry_arrays(damaged, "e")
        assert str(also.value) == str(refused)
    else:
        expected = (columns.slots, columns.txids, columns.payloads, columns.producers)
        assert as_lists(damaged) == expected


def test_a_negative_txid_or_unknown_flag_takes_the_strict_decoder_and_its_message() -> None:
    good = body(
        [StoredRecord(1, RecordFlag.NONE, b"ab"), StoredRecord(2, RecordFlag.NONE, b"c")],
        Codec.NONE,
    )
    raw_at = len(good) - (14 + 1)  # the second record's header
    for patch in (b"\xff" * 8, b"\x00" * 8 + b"\x40\x00"):
        damaged = good[:raw_at] + patch + good[raw_at + len(patch) :]
        with pytest.raises(EntryFormatError, match="record 1 has flags"):
            entry_arrays(damaged, "e")
