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
from core.records import RecordFlag, StoredRecord
from tests.support.stored_records import MIXED

pytestmark = pytest.mark.unit

RECORDS = MIXED


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
