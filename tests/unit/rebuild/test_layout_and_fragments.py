"""The under-replication layout (BookKeeper's paths and text formats) and which fragments of a
ledger a rebuild copies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.codecs.entry import DigestType
from ledger.codecs.metadata import Ensemble, LedgerMetadata, LedgerState
from ledger.codecs.underreplication import (
    Layout,
    Marker,
    check_layout,
    decode_full_check_time,
    decode_lock,
    decode_marker,
    encode_full_check_time,
    encode_layout,
    encode_lock,
    encode_marker,
    ledger_of_marker,
)
from ledger.drivers.rebuild import Fragment, plan_fragments
from ledger.errors import MarkerFormatError


def test_marker_paths_split_the_id_into_four_hex_quarters_as_bookkeeper_does() -> None:
    layout = Layout()
    # the example of BookKeeper's ZkLedgerUnderreplicationManager: 0xcafebeef0000feed
    assert layout.marker_parent(0xCAFEBEEF0000FEED) == (
        "/ledgers/underreplication/ledgers/cafe/beef/0000/feed"
    )
    assert layout.marker(7) == "/ledgers/underreplication/ledgers/0000/0000/0000/0007/urL0000000007"
    assert layout.lock(7) == "/ledgers/underreplication/locks/urL0000000007"
    assert ledger_of_marker("urL0000000007") == 7
    assert ledger_of_marker(f"urL{0x7AFEBEEF0000FEED}") == 0x7AFEBEEF0000FEED
    assert ledger_of_marker("urLx") is None and ledger_of_marker("0000") is None


def test_the_text_formats_are_protobuf_text_as_bookkeeper_writes_them() -> None:
    # the bytes BookKeeper's Java toString() of the same messages gives
    marker = Marker(("127.0.0.1:3181", "127.0.0.2:3181"), 1700000000000)
    assert encode_marker(marker) == (
        b'replica: "127.0.0.1:3181"\nreplica: "127.0.0.2:3181"\nctime: 1700000000000\n'
    )
    assert decode_marker(encode_marker(marker), "m") == marker
    assert decode_marker(b'replica: "a:1"\n', "m") == Marker(("a:1",), None)
    assert (
        encode_lock("host") == b'bookieId: "host"\n' and decode_lock(b'bookieId: "h"', "l") == "h"
    )
    assert encode_layout() == b'type: "BASIC"\nversion: 1\n'
    check_layout(encode_layout(), "layout")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"replica: 3", "not a UnderreplicatedLedgerFormat"),
        (b"\xff\xfe", "not a UnderreplicatedLedgerFormat"),
        (b"x" * 70000, "at most"),
    ],
)
def test_a_foreign_marker_is_a_clear_error(data: bytes, expected: str) -> None:
    with pytest.raises(MarkerFormatError, match=expected):
        decode_marker(data, "/ledgers/underreplication/ledgers/x")


def test_the_last_full_check_is_recorded_as_bookkeepers_auditor_records_it() -> None:
    # binary protobuf, field 1 a varint: what BookKeeper's setCheckAllLedgersCTime writes
    assert encode_full_check_time(1700000000000) == b"\x08\x80\xd0\x95\xff\xbc\x31"
    assert decode_full_check_time(encode_full_check_time(1700000000000), "c") == 1700000000000
    assert decode_full_check_time(b"", "c") is None  # a node with no time in it
    with pytest.raises(MarkerFormatError, match="not a CheckAllLedgersFormat"):
        decode_full_check_time(b"\x0b\xff", "/ledgers/underreplication/checkallledgersctime")


def test_a_foreign_layout_is_refused() -> None:
    with pytest.raises(MarkerFormatError, match="expected 'BASIC' version 1"):
        check_layout(b'type: "HIERARCHICAL"\nversion: 2\n', "LAYOUT")


def test_merging_adds_only_new_bookies() -> None:
    marker = Marker(("a:1",), 1)
    assert marker.merged(("a:1",), 2) is None
    assert marker.merged(("b:1", "a:1", "b:1"), 2) == Marker(("a:1", "b:1"), 2)


def metadata(
    ensembles: tuple[Ensemble, ...], state: LedgerState, last: int = -1, e: int = 3, w: int = 3
) -> LedgerMetadata:
    closed = state is LedgerState.CLOSED
    return LedgerMetadata(
        e, w, 2, ensembles, DigestType.CRC32C, b"pw", state,
        last if closed else -1, 10 if closed else 0,
    )  # fmt: skip


def test_a_closed_ledgers_fragments_are_every_span_of_the_lost_bookie() -> None:
    md = metadata(
        (
            Ensemble(0, ("a", "b", "c")),
            Ensemble(10, ("a", "d", "c")),
            Ensemble(20, ("e", "d", "c")),
        ),
        LedgerState.CLOSED,
        last=25,
    )
    plan = plan_fragments(md, {"a", "c"})
    assert plan.deferred == ()
    assert plan.copyable == (
        Fragment(0, 9, 0, "a"),
        Fragment(0, 9, 2, "c"),
        Fragment(10, 19, 0, "a"),
        Fragment(10, 19, 2, "c"),
        Fragment(20, 25, 2, "c"),
    )


def test_an_open_ledgers_last_ensemble_is_left_to_its_writer() -> None:
    md = metadata((Ensemble(0, ("a", "b", "c")), Ensemble(5, ("d", "b", "c"))), LedgerState.OPEN)
    plan = plan_fragments(md, {"b"})
    assert plan.copyable == (Fragment(0, 4, 1, "b"),)
    assert plan.deferred == (Fragment(5, -1, 1, "b"),)
    # in recovery: still not closed, still its recoverer's
    recovering = metadata((Ensemble(0, ("a", "b", "c")),), LedgerState.IN_RECOVERY)
    assert plan_fragments(recovering, {"a"}).deferred == (Fragment(0, -1, 0, "a"),)


def test_an_empty_last_fragment_of_a_closed_ledger_copies_nothing() -> None:
    md = metadata(
        (Ensemble(0, ("a", "b", "c")), Ensemble(5, ("a", "d", "c"))), LedgerState.CLOSED, 4
    )
    plan = plan_fragments(md, {"a"})
    assert plan.copyable[-1] == Fragment(5, 4, 0, "a")
    assert list(plan.copyable[-1].entries(3, 3)) == []
    assert plan.copyable[-1].describe() == "a at position 0 (no entries)"


@given(e=st.integers(1, 6), data=st.data(), first=st.integers(0, 50), length=st.integers(0, 40))
def test_a_fragment_holds_exactly_the_entries_whose_write_set_has_its_position(
    e: int, data: st.DataObject, first: int, length: int
) -> None:
    w = data.draw(st.integers(1, e))
    position = data.draw(st.integers(0, e - 1))
    fragment = Fragment(first, first + length - 1, position, "x")
    held = list(fragment.entries(e, w))
    for entry in range(first, first + length):
        stored = any((entry + i) % e == position for i in range(w))
        assert (entry in held) == stored
    # every entry is held by exactly w positions
    everyone = [list(Fragment(first, first + length - 1, p, "x").entries(e, w)) for p in range(e)]
    assert sum(len(h) for h in everyone) == w * length
