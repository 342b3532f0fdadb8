"""Hypothesis strategies for the records an entry carries (core/records.StoredRecord): plain
user records, control records, and idempotent writes with their producer prefix."""

from __future__ import annotations

from hypothesis import strategies as st

from core.records import RecordFlag, StoredRecord, producer_payload

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
# An entry's records: mostly plain, some control records and idempotent writes.
MIXED = st.lists(st.one_of(PLAIN, PLAIN, CONTROL, PRODUCED), min_size=1, max_size=30)
