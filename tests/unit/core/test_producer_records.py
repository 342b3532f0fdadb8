"""Producer records in the entry format: the prefix travels with the record and comes out as
fields, positions are unchanged, and a short prefix is refused."""

from __future__ import annotations

import pytest

from core.dlsn import DLSN
from core.entry_format import as_log_record, decode_entry, encode_entry, log_records
from core.errors import EntryFormatError
from core.records import RecordFlag, StoredRecord, producer_payload


def test_a_producer_record_reads_back_with_its_numbers_and_takes_a_position() -> None:
    stored = [
        StoredRecord(5, RecordFlag.NONE, b"plain"),
        StoredRecord(6, RecordFlag.CONTROL, b"control"),
        StoredRecord(7, RecordFlag.PRODUCER, producer_payload(2**64 - 1, 9, b"idem")),
    ]
    body = encode_entry(stored, first_position=3, write_time_ms=1, region="us-east")
    entry = decode_entry(body, "test")
    found = log_records(entry, 1, 0, first_seq=10)
    assert [seq for _, _, seq in found] == [13, -1, 14]
    dlsn, record, seq = found[2]
    log_record = as_log_record(record, dlsn, seq, entry)
    assert log_record.payload == b"idem" and log_record.dlsn == DLSN(1, 0, 2)
    assert (log_record.producer_id, log_record.producer_seq) == (2**64 - 1, 9)
    plain = as_log_record(found[0][1], found[0][0], found[0][2], entry)
    assert plain.producer_id is None and plain.payload == b"plain"


def test_a_producer_record_without_its_prefix_is_refused() -> None:
    short = [StoredRecord(1, RecordFlag.PRODUCER, b"0123456789")]
    body = encode_entry(short, first_position=0, write_time_ms=1, region="us-east")
    with pytest.raises(
        EntryFormatError, match="idempotent write of 10 bytes; expected at least 16"
    ):
        decode_entry(body, "test")
