"""The data source's columnar decoding (pipeline/entry_columns.py, pipeline/batch.py) agrees
with the record decoders on every run of entries and every range, and refuses exactly the bytes
they refuse, with the same message."""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.dlsn import DLSN
from core.entry_format import Codec, decode_entry_columns, encode_entry
from core.errors import EntryFormatError
from core.records import RecordFlag, StoredRecord
from pipeline.batch import ArrowDecoder
from pipeline.entry_columns import decode_run
from reader.ranges import EntryRange, LogRecordDecoder
from tests.support.stored_records import CONTROL, MIXED, PLAIN, PRODUCED

pytestmark = pytest.mark.unit


@st.composite
def uniform(draw: st.DrawFn) -> list[StoredRecord]:
    """Records of one payload length: the bulk path that never walks record by record."""
    size = draw(st.integers(0, 24))
    payloads = draw(st.lists(st.binary(min_size=size, max_size=size), min_size=1, max_size=30))
    return [StoredRecord(i, RecordFlag.NONE, p) for i, p in enumerate(payloads)]


RECORDS = st.one_of(MIXED, uniform())


def body(records: list[StoredRecord], codec: Codec = Codec.NONE, eos: bool = False) -> bytes:
    if eos:
        records = [*records, StoredRecord(0, RecordFlag.END_OF_STREAM, b"")]
    return encode_entry(
        records, first_position=5, write_time_ms=1_700_000_000_123, region="eu-west", codec=codec
    )


Row = tuple[int, int, int, int, bytes, tuple[int, int] | None]


def strict_rows(bodies: list[bytes]) -> list[Row]:
    """(entry index, slot, rank, txid, payload, producer) of every user record, by the strict
    columnar decoder of core/entry_format.py."""
    rows: list[Row] = []
    for index, data in enumerate(bodies):
        columns = decode_entry_columns(data, "e")
        producers = {at: (producer, seq) for at, producer, seq in columns.producers}
        for rank, (slot, txid, payload) in enumerate(
            zip(columns.slots, columns.txids, columns.payloads, strict=True)
        ):
            rows.append((index, slot, rank, txid, payload, producers.get(rank)))
    return rows


def run_rows(bodies: list[bytes]) -> list[Row]:
    run = decode_run(bodies, [f"e{i}" for i in range(len(bodies))])
    assert len(run.heads) == len(bodies)
    payloads = run.payloads.to_pylist()
    return [
        (
            int(run.entry_index[i]),
            int(run.slots[i]),
            int(run.ranks[i]),
            int(run.txids[i]),
            payloads[i],
            (int(run.producer_ids[i]) % (1 << 64), int(run.producer_seqs[i]))
            if run.producer_set[i]
            else None,
        )
        for i in range(len(run))
    ]


@settings(deadline=None)  # a run of entries through numpy and Arrow: slow when the machine is busy
@given(st.lists(st.tuples(RECORDS, st.sampled_from(Codec), st.booleans()), min_size=1, max_size=4))
def test_a_run_of_entries_holds_the_strict_decoders_records(
    entries: list[tuple[list[StoredRecord], Codec, bool]],
) -> None:
    bodies = [body(records, codec, eos) for records, codec, eos in entries]
    assert run_rows(bodies) == strict_rows(bodies)


def test_one_length_in_the_first_record_and_a_grid_that_fits_still_walks_the_rest() -> None:
    # 3 records of 4, 2 and 6 bytes: 54 raw bytes, 3 strides of 18, the first record's length
    # matching that stride; the second's does not, so the records are walked one by one.
    records = [StoredRecord(i, RecordFlag.NONE, b"x" * n) for i, n in enumerate((4, 2, 6))]
    assert run_rows([body(records)]) == strict_rows([body(records)])
    assert [p for *_, p, _ in run_rows([body(records)])] == [b"xxxx", b"xx", b"xxxxxx"]


def damage(data: st.DataObject, records: list[StoredRecord]) -> bytes:
    good = bytearray(body(records))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(good) - 1))
        good[at] ^= data.draw(st.integers(1, 255))
    return bytes(good[: data.draw(st.integers(len(good) // 2, len(good)))])


@settings(deadline=None)
@given(st.lists(RECORDS, min_size=1, max_size=3), st.data())
def test_corrupt_bytes_are_refused_alike_naming_the_first_bad_entry(
    entries: list[list[StoredRecord]], data: st.DataObject
) -> None:
    bodies = [
        damage(data, records) if data.draw(st.booleans()) else body(records) for records in entries
    ]
    wheres = [f"e{i}" for i in range(len(bodies))]
    try:
        for one, where in zip(bodies, wheres, strict=True):
            decode_entry_columns(one, where)
    except EntryFormatError as refused:
        with pytest.raises(EntryFormatError) as also:
            decode_run(bodies, wheres)
        assert str(also.value) == str(refused)
    else:
        assert run_rows(bodies) == strict_rows(bodies)


def no_records(first_position: int = 0) -> bytes:
    """An entry of no records, valid to the decoders (globelog's writer never makes one)."""
    region = b"us-east"
    header = struct.pack(">2sBBIQqIIB", b"GL", 1, 0, 0, first_position, 1, 0, 0, len(region))
    return header + region


def test_entries_of_no_records_anywhere_in_a_run() -> None:
    some = body([StoredRecord(1, RecordFlag.NONE, b"ab"), StoredRecord(2, RecordFlag.NONE, b"")])
    assert decode_entry_columns(no_records(), "e").txids == []
    for bodies in ([some, no_records()], [no_records(), some], [some, no_records(), some]):
        assert run_rows(bodies) == strict_rows(bodies)
    assert run_rows([no_records(), no_records()]) == []


def test_a_write_time_or_sequence_id_beyond_a_column_is_an_entry_format_error() -> None:
    part = EntryRange("s", 3, 77, 10, 10, 0, DLSN(3, 0, 0), None)
    late = encode_entry([StoredRecord(1, RecordFlag.NONE, b"x")], first_position=0,
                        write_time_ms=1 << 62, region="us-east")  # fmt: skip
    with pytest.raises(EntryFormatError, match="entry 10: write time 4611686018427387904 ms"):
        ArrowDecoder().from_entries(part, [(10, late)])
    far = encode_entry([StoredRecord(1, RecordFlag.NONE, b"x")], first_position=(1 << 63) - 1,
                       write_time_ms=1, region="us-east")  # fmt: skip
    with pytest.raises(EntryFormatError, match="entry 10: first position 9223372036854775807"):
        ArrowDecoder().from_entries(part, [(10, far)])


def test_a_negative_txid_or_unknown_flag_takes_the_strict_decoder_and_its_message() -> None:
    good = body([StoredRecord(1, RecordFlag.NONE, b"ab"), StoredRecord(2, RecordFlag.NONE, b"c")])
    raw_at = len(good) - (14 + 1)  # the second record's header
    for patch in (b"\xff" * 8, b"\x00" * 8 + b"\x40\x00"):
        damaged = good[:raw_at] + patch + good[raw_at + len(patch) :]
        with pytest.raises(EntryFormatError, match="e0: record 1 has flags"):
            decode_run([damaged], ["e0"])
        # a later entry's broken header does not hide this one's fault
        with pytest.raises(EntryFormatError, match="e0: record 1 has flags"):
            decode_run([damaged, good[:10]], ["e0", "e1"])


# ------------------------------------------- Arrow batches against the library's records


def written(entries: list[list[StoredRecord]]) -> list[tuple[int, bytes]]:
    """Entries 10, 11, ... of a segment, each body's first position counting the user records
    before it, as the writer sets it."""
    bodies, position = [], 0
    for offset, records in enumerate(entries):
        region = ("us-east", "eu-west")[offset % 2]
        data = encode_entry(
            records, first_position=position, write_time_ms=1_700_000_000_000 + offset,
            region=region,
        )  # fmt: skip
        bodies.append((10 + offset, data))
        position += sum(1 for r in records if not r.flags & (RecordFlag.CONTROL))
    return bodies


def bound(draw: st.DrawFn, entries: int) -> DLSN:
    """A DLSN in segment 3 (entries 10..), or before or after it."""
    inside = st.builds(DLSN, st.just(3), st.integers(9, 11 + entries), st.integers(0, 6))
    return draw(st.one_of(inside, inside, inside, st.sampled_from([DLSN(2, 5, 0), DLSN(4, 0, 0)])))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(st.one_of(PLAIN, CONTROL, PRODUCED), min_size=1, max_size=8),
        min_size=1,
        max_size=4,
    ),
    st.data(),
)
def test_arrow_batches_hold_the_library_records_of_any_range(
    entries: list[list[StoredRecord]], data: st.DataObject
) -> None:
    bodies = written(entries)
    start = bound(data.draw, len(entries))
    end = data.draw(st.one_of(st.none(), st.just(bound(data.draw, len(entries)))))
    part = EntryRange("s", 3, 77, 10, 9 + len(entries), 1000, start, end)
    expected = LogRecordDecoder().from_entries(part, bodies) or []
    batch = ArrowDecoder().from_entries(part, bodies)
    rows = [] if batch is None else batch.to_pylist()
    utc = datetime.UTC
    assert [
        (
            r["dlsn"], (r["segment"], r["entry"], r["slot"]), r["txid"], r["seq"], r["payload"],
            r["writer_region"], r["write_time"], r["producer_id"], r["producer_seq"],
        )
        for r in rows
    ] == [
        (
            str(r.dlsn), (r.dlsn.segment, r.dlsn.entry, r.dlsn.slot), r.txid, r.seq, r.payload,
            r.writer_region, datetime.datetime.fromtimestamp(r.write_time_ms / 1000, utc),
            None if r.producer_id is None else r.producer_id - ((r.producer_id >> 63) << 64),
            r.producer_seq,
        )
        for r in expected
    ]  # fmt: skip
    assert all(r["stream"] == "s" for r in rows)
