"""Ledger metadata v3 bytes, znode paths and id generation.

The golden metadata was built by hand from DataFormats.proto and LedgerMetadataSerDe, and
checked byte for byte against BookKeeper 4.17.2 (LedgerMetadataSerDe.serialize of the same
ledger; its parseConfig also reads our bytes). The path table matches
StringUtils.getHybridHierarchicalLedgerPath for the same ids.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.codecs.entry import DigestType
from ledger.codecs.metadata import (
    Ensemble,
    LedgerIdGenLayout,
    LedgerMetadata,
    LedgerState,
    hob_high_bits,
    ledger_id_from_path,
    ledger_path,
    long_ledger_id,
    parse_metadata,
    serialize_metadata,
    short_ledger_id,
    write_set_indices,
)
from ledger.codecs.varint import encode_varint
from ledger.errors import LedgerIdOverflowError, MetadataFormatError, ProtocolError
from tests.support.wire import Writer

pytestmark = pytest.mark.unit

BOOKIES = ("127.0.0.1:3181", "127.0.0.2:3181", "127.0.0.3:3181")
HEADER = b"BookieMetadataFormatVersion\t3\n"
GOLDEN_OPEN = (
    HEADER
    + bytes.fromhex(
        "51"  # writeDelimitedTo: message length 81
        "0803"
        "1003"
        "1800"  # quorumSize 3, ensembleSize 3, length 0
        "20ffffffffffffffffff01"  # lastEntryId -1
        "2801"  # state OPEN
        "3232"  # segment (50 bytes):
        "0a0e"
        + b"127.0.0.1:3181".hex()
        + "0a0e"
        + b"127.0.0.2:3181".hex()
        + "0a0e"
        + b"127.0.0.3:3181".hex()
        + "1000"  # ensembleMember x3, firstEntryId 0
        "3803"  # digestType CRC32C
        "42027077"  # password "pw"
        "4802"  # ackQuorumSize 2
        "6000"  # cToken 0 (always written)
    )
)
OPEN = LedgerMetadata(3, 3, 2, (Ensemble(0, BOOKIES),), DigestType.CRC32C, b"pw")
CLOSED = LedgerMetadata(
    ensemble_size=3,
    write_quorum=2,
    ack_quorum=2,
    ensembles=(Ensemble(0, BOOKIES), Ensemble(5, ("127.0.0.1:3181", "127.0.0.4:3181", BOOKIES[2]))),
    digest_type=DigestType.HMAC,
    password=b"secret",
    state=LedgerState.CLOSED,
    last_entry_id=9,
    length=12345,
    ctime=1700000000000,
    custom_metadata=(("application", b"globelog"), ("k2", b"\x00\xff")),
    ctoken=42,
)
# LedgerMetadataSerDe.serialize of CLOSED in BookKeeper 4.17.2.
JAVA_CLOSED = bytes.fromhex(
    "426f6f6b69654d65746164617461466f726d617456657273696f6e09330aab010802100318b96020092803"
    "32320a0e3132372e302e302e313a333138310a0e3132372e302e302e323a333138310a0e3132372e302e30"
    "2e333a33313831100032320a0e3132372e302e302e313a333138310a0e3132372e302e302e343a33313831"
    "0a0e3132372e302e302e333a3331383110053802420673656372657448025080d095ffbc315a170a0b6170"
    "706c69636174696f6e1208676c6f62656c6f675a080a026b32120200ff602a"
)


def test_golden_open_metadata() -> None:
    assert serialize_metadata(OPEN) == GOLDEN_OPEN
    assert parse_metadata(GOLDEN_OPEN) == OPEN


def test_closed_metadata_matches_bookkeeper() -> None:
    assert serialize_metadata(CLOSED) == JAVA_CLOSED
    assert parse_metadata(JAVA_CLOSED) == CLOSED


# ------------------------------------------------------------------------------ round trip

BOOKIE = st.from_regex(r"[a-z0-9.\-]{1,20}:[0-9]{1,5}", fullmatch=True)


@st.composite
def metadata(draw: st.DrawFn) -> LedgerMetadata:
    ensemble_size = draw(st.integers(1, 6))
    write_quorum = draw(st.integers(1, ensemble_size))
    ack_quorum = draw(st.integers(1, write_quorum))
    firsts = sorted(draw(st.sets(st.integers(1, 2**40), max_size=4)))
    ensembles = tuple(
        Ensemble(
            first,
            tuple(
                draw(st.lists(BOOKIE, min_size=ensemble_size, max_size=ensemble_size, unique=True))
            ),
        )
        for first in [0, *firsts]
    )
    state = draw(st.sampled_from(LedgerState))
    closed = state is LedgerState.CLOSED
    keys = draw(st.lists(st.text(max_size=10), unique=True, max_size=3))
    return LedgerMetadata(
        ensemble_size=ensemble_size,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        ensembles=ensembles,
        digest_type=draw(st.sampled_from(DigestType)),
        password=draw(st.binary(max_size=16)),
        state=state,
        last_entry_id=draw(st.integers(-1, 2**62)) if closed else -1,
        length=draw(st.integers(0, 2**62)) if closed else 0,
        ctime=draw(st.none() | st.integers(-(2**63), 2**63 - 1)),
        custom_metadata=tuple((key, draw(st.binary(max_size=8))) for key in keys),
        ctoken=draw(st.integers(-(2**63), 2**63 - 1)),
    )


@given(metadata())
def test_metadata_round_trip(md: LedgerMetadata) -> None:
    assert parse_metadata(serialize_metadata(md)) == md


# -------------------------------------------------------------------------- bad metadata


def _message(mutate: dict[int, object] | None = None) -> bytes:
    """GOLDEN_OPEN's protobuf with some fields replaced (None drops a field)."""
    fields: dict[int, object] = {1: 3, 2: 3, 3: 0, 4: -1, 5: 1, 7: 3, 8: b"pw", 9: 2, 12: 0}
    fields.update(mutate or {})
    out = Writer()
    for number in sorted(fields):
        value = fields[number]
        if isinstance(value, int):
            out.int64(number, value)
        elif isinstance(value, bytes):
            out.binary(number, value)
    segment = Writer()
    for bookie in BOOKIES:
        segment.string(1, bookie)
    out.message(6, segment.int64(2, 0))
    message = out.finish()
    return HEADER + encode_varint(len(message)) + message


def test_helper_builds_valid_metadata() -> None:
    assert parse_metadata(_message()) == OPEN


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "does not start with"),
        (b"garbage", "does not start with"),
        (b"BookieMetadataFormatVersion\t", "no version number line"),
        (b"BookieMetadataFormatVersion\tx\n", "no version number line"),
        (b"BookieMetadataFormatVersion\t2\nquorumSize: 3\n", "format version 2"),
        (b"BookieMetadataFormatVersion\t12345678901\n", "no version number line"),
        (HEADER, "truncated varint"),
        (HEADER + b"\x05\x08\x03", "announces 5 protobuf bytes"),
        (GOLDEN_OPEN + b"\x00", "announces 81 protobuf bytes"),
    ],
)
def test_garbage_is_rejected_clearly(data: bytes, message: str) -> None:
    with pytest.raises(MetadataFormatError, match=message):
        parse_metadata(data)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        ({1: None}, "required field quorumSize"),
        ({5: None}, "required field state"),
        ({3: None}, "required field length"),
        ({7: None}, "required field digestType"),
        ({8: None}, "required field password"),
        ({5: 9}, "not a known LedgerState"),
        ({7: 9}, "not a known DigestType"),
        ({9: 4}, "quorums must satisfy"),
        ({2: 4}, "has 3 bookies; expected 4"),
        ({5: 3, 4: None}, "required field lastEntryId"),
        ({5: 3, 4: -2}, "closed at entry -2"),
    ],
)
def test_invalid_metadata_is_rejected_clearly(mutate: dict[int, object], message: str) -> None:
    with pytest.raises(MetadataFormatError, match=message):
        parse_metadata(_message(mutate))


def test_ack_quorum_defaults_to_the_write_quorum() -> None:
    assert parse_metadata(_message({9: None})).ack_quorum == 3


def test_unclosed_ledgers_ignore_stored_progress_as_bookkeeper_does() -> None:
    md = parse_metadata(_message({3: 77, 4: 5}))
    assert (md.last_entry_id, md.length) == (-1, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ensembles": ()}, "ensemble history is empty"),
        ({"ensembles": (Ensemble(1, BOOKIES),)}, "starts at entry 1, not 0"),
        ({"ensembles": (Ensemble(0, BOOKIES), Ensemble(0, BOOKIES))}, "not after the previous"),
        ({"ensembles": (Ensemble(0, (*BOOKIES[:2], BOOKIES[0])),)}, "repeated bookie"),
        ({"custom_metadata": (("k", b""), ("k", b"x"))}, "repeats a key"),
        ({"last_entry_id": 4}, "OPEN but has last entry 4"),
    ],
)
def test_invalid_metadata_cannot_be_built(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {
        "ensemble_size": 3,
        "write_quorum": 3,
        "ack_quorum": 2,
        "ensembles": (Ensemble(0, BOOKIES),),
        "digest_type": DigestType.CRC32C,
        "password": b"",
    }
    fields.update(kwargs)
    with pytest.raises(MetadataFormatError, match=message):
        LedgerMetadata(**fields)  # type: ignore[arg-type]


@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_rejected_as_metadata_errors(data: bytes) -> None:
    with pytest.raises(MetadataFormatError):
        parse_metadata(data)


@given(st.binary(max_size=200))
def test_arbitrary_protobuf_after_a_valid_header_gives_metadata_or_error(data: bytes) -> None:
    with contextlib.suppress(MetadataFormatError):
        parse_metadata(HEADER + encode_varint(len(data)) + data)


@given(metadata(), st.data())
def test_mutated_metadata_gives_metadata_or_metadata_error(
    md: LedgerMetadata, data: st.DataObject
) -> None:
    encoded = bytearray(serialize_metadata(md))
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(encoded) - 1))
        encoded[index] = data.draw(st.integers(0, 255))
    try:
        parse_metadata(bytes(encoded))
    except MetadataFormatError as err:
        assert isinstance(err, ProtocolError)


# ------------------------------------------------------------------- ensembles and write sets


def test_ensemble_for_entry_uses_the_last_ensemble_starting_at_or_before_it() -> None:
    assert CLOSED.ensemble_for_entry(0) == BOOKIES
    assert CLOSED.ensemble_for_entry(4) == BOOKIES
    assert CLOSED.ensemble_for_entry(5) == CLOSED.ensembles[1].bookies
    assert CLOSED.ensemble_for_entry(10**12) == CLOSED.ensembles[1].bookies
    assert CLOSED.current_ensemble == CLOSED.ensembles[1].bookies


def test_write_sets_are_round_robin() -> None:
    assert write_set_indices(0, 5, 3) == (0, 1, 2)
    assert write_set_indices(4, 5, 3) == (4, 0, 1)
    assert write_set_indices(7, 3, 3) == (1, 2, 0)
    assert CLOSED.write_set(1) == (BOOKIES[1], BOOKIES[2])
    # striping uses the absolute entry id, not the offset inside the ensemble
    assert CLOSED.write_set(5) == (BOOKIES[2], "127.0.0.1:3181")
    assert CLOSED.write_set(6) == ("127.0.0.1:3181", "127.0.0.4:3181")


# --------------------------------------------------------------------------------- layout

PATHS = [
    (0, "/ledgers/00/0000/L0000"),
    (1, "/ledgers/00/0000/L0001"),
    (12345, "/ledgers/00/0001/L2345"),
    (2147483646, "/ledgers/21/4748/L3646"),
    (2147483647, "/ledgers/000/0000/0021/4748/L3647"),
    (4294967301, "/ledgers/000/0000/0042/9496/L7301"),
    (2**63 - 1, "/ledgers/922/3372/0368/5477/L5807"),
]


@pytest.mark.parametrize(("ledger_id", "path"), PATHS)
def test_ledger_paths_match_bookkeeper(ledger_id: int, path: str) -> None:
    assert ledger_path(ledger_id) == path
    assert ledger_id_from_path(path) == ledger_id


@given(st.integers(0, 2**63 - 1))
def test_ledger_path_round_trip(ledger_id: int) -> None:
    path = ledger_path(ledger_id, root="/bk/ledgers")
    assert ledger_id_from_path(path, root="/bk/ledgers") == ledger_id


@pytest.mark.parametrize(
    "path",
    [
        "/ledgers/available/127.0.0.1:3181",
        "/ledgers/idgen/ID-0000000001",
        "/ledgers/00/0000/0001",
        "/ledgers/00/0000",
        "/other/00/0000/L0001",
        "/ledgers/0a/0000/L0001",
    ],
)
def test_non_ledger_paths_are_rejected(path: str) -> None:
    with pytest.raises(MetadataFormatError, match="not a ledger znode path"):
        ledger_id_from_path(path)


def test_short_ids_come_from_the_sequential_znode_suffix() -> None:
    layout = LedgerIdGenLayout()
    assert layout.short_prefix == "/ledgers/idgen/ID-"
    assert short_ledger_id("/ledgers/idgen/ID-0000000042", layout.short_prefix) == 42
    assert short_ledger_id("/ledgers/idgen/ID-2147483646", layout.short_prefix) == 2147483646
    for overflow in ("2147483647", "-2147483648"):
        with pytest.raises(LedgerIdOverflowError):
            short_ledger_id(f"/ledgers/idgen/ID-{overflow}", layout.short_prefix)
    for garbage in ("/ledgers/idgen/ID-", "/ledgers/idgen/ID-12a", "/elsewhere/ID-0000000001"):
        with pytest.raises(MetadataFormatError):
            short_ledger_id(garbage, layout.short_prefix)


def test_long_ids_combine_high_bits_and_a_sequential_suffix() -> None:
    layout = LedgerIdGenLayout("/bk")
    assert layout.long_root == "/bk/idgen-long"
    assert layout.hob_path(1) == "/bk/idgen-long/HOB-0000000001"
    prefix = layout.long_prefix(1)
    assert prefix == "/bk/idgen-long/HOB-0000000001/ID-"
    ledger_id = long_ledger_id(1, prefix + "0000000005", prefix)
    assert ledger_id == (1 << 32) | 5
    assert ledger_path(ledger_id, "/bk") == "/bk/000/0000/0042/9496/L7301"
    with pytest.raises(LedgerIdOverflowError):
        long_ledger_id(1, prefix + "2147483647", prefix)
    assert hob_high_bits("HOB-0000000007") == 7
    assert hob_high_bits("ID-0000000007") is None


def test_hostile_metadata_gives_a_short_error_quickly() -> None:
    # A znode-sized message of empty ensembles: every one of them is a fault.
    segment = Writer().message(6, Writer().int64(2, 0)).finish()
    fields = (
        Writer().int64(1, 3).int64(2, 3).int64(3, 0).int64(4, -1).uint(5, 1).finish()
        + segment * 200_000
        + Writer().uint(7, 3).binary(8, b"").finish()
    )
    data = HEADER + encode_varint(len(fields)) + fields
    assert len(data) < 1024 * 1024
    with pytest.raises(MetadataFormatError) as caught:
        parse_metadata(data)
    assert len(str(caught.value)) < 2000, len(str(caught.value))
    assert str(caught.value).endswith("2 more")  # the rest: not checked, not listed
