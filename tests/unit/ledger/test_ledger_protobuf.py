"""The proto2 wire codec: golden varints, round trips, and malformed input → ProtocolError only."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.codecs import protobuf
from ledger.codecs.protobuf import Writer, decode_varint, encode_varint, parse
from ledger.codes import StatusCode
from ledger.errors import ProtocolError

pytestmark = pytest.mark.unit

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
UINT64 = st.integers(min_value=0, max_value=2**64 - 1)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (2**64 - 1, "ffffffffffffffffff01"),
    ],
)
def test_varint_golden(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded), 0, "t") == (value, len(encoded) // 2)


def test_negative_int64_takes_ten_bytes_as_protobuf_java_writes_it() -> None:
    # field 1, varint: tag 08, then -1 as two's complement 64-bit
    assert Writer().int64(1, -1).finish().hex() == "08ffffffffffffffffff01"
    assert parse(bytes.fromhex("08ffffffffffffffffff01"), "t").int64(1) == -1


def test_int32_reads_the_low_32_bits_signed() -> None:
    data = Writer().int64(1, -5).finish()
    assert parse(data, "t").int32(1) == -5
    assert parse(Writer().uint(1, 2**32 + 7).finish(), "t").int32(1) == 7


@given(UINT64)
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert decode_varint(encoded, 0, "t") == (value, len(encoded))


@given(
    st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=protobuf.FIELD_NUMBER_MAX),
            st.one_of(INT64, st.binary(max_size=300), st.text(max_size=50)),
        ),
        max_size=20,
    )
)
def test_writer_then_parse_round_trip(fields: list[tuple[int, int | bytes | str]]) -> None:
    out = Writer()
    for number, value in fields:
        if isinstance(value, int):
            out.int64(number, value)
        elif isinstance(value, bytes):
            out.binary(number, value)
        else:
            out.string(number, value)
    parsed = parse(out.finish(), "t")
    last: dict[int, int | bytes | str] = {}
    for number, value in fields:
        last[number] = value  # scalars: the last occurrence wins
    for number, value in last.items():
        got = [type(v) for n, v in fields if n == number]
        if len(set(got)) > 1:
            continue  # same field number with two wire types: covered by the mismatch test
        if isinstance(value, int):
            assert parsed.int64(number) == value
        elif isinstance(value, bytes):
            assert parsed.binary(number) == value
        else:
            assert parsed.string(number) == value


def test_unknown_fields_of_every_wire_type_are_skipped() -> None:
    known = Writer().int64(1, 42).finish()
    unknown = bytes.fromhex(
        "b80601"  # field 103 varint 1
        "c9060102030405060708"  # field 105 fixed64
        "d5060a0b0c0d"  # field 106 fixed32
        "da0603616263"  # field 107 bytes "abc"
        "e306"
        "0801"
        "eb06"
        "ec06"
        "e406"  # group 108 holding field 1 and an empty group 109
    )
    fields = parse(unknown + known + unknown, "t")
    assert fields.int64(1) == 42


def test_repeated_embedded_messages_merge() -> None:
    first = Writer().int64(1, 1).int64(2, 2)
    second = Writer().int64(2, 20).int64(3, 30)
    data = Writer().message(5, first).message(5, second).finish()
    merged = parse(data, "t").message(5, "sub")
    assert merged is not None
    assert (merged.int64(1), merged.int64(2), merged.int64(3)) == (1, 20, 30)


def test_enum_values_and_unknown_enum() -> None:
    assert parse(Writer().uint(2, 504).finish(), "t").enum(2, StatusCode) is StatusCode.EFENCED
    with pytest.raises(ProtocolError, match="not a known StatusCode"):
        parse(Writer().uint(2, 999).finish(), "t").enum(2, StatusCode)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("08", "truncated varint"),
        ("08" + "ff" * 10 + "01", "longer than 10 bytes"),
        ("0001", "invalid field number 0"),
        ("0e", "invalid wire type 6"),
        ("0f", "invalid wire type 7"),
        ("0c", "end of group 1 without a start"),
        ("0b0801", "not closed"),
        ("0b14", "closed by end of group 2"),
        ("0a05616263", "needs 5 bytes"),
        ("0901020304", "needs 8 bytes"),
        ("0d0102", "needs 4 bytes"),
    ],
)
def test_malformed_input_names_the_problem(data: str, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        parse(bytes.fromhex(data), "t")


def test_wire_type_mismatch_is_a_protocol_error() -> None:
    fields = parse(Writer().binary(1, b"x").finish(), "t")
    with pytest.raises(ProtocolError, match="wire type 2; expected 0"):
        fields.int64(1)


def test_invalid_utf8_is_a_protocol_error() -> None:
    fields = parse(Writer().binary(1, b"\xff\xfe").finish(), "t")
    with pytest.raises(ProtocolError, match="not valid UTF-8"):
        fields.string(1)


def test_nesting_is_bounded() -> None:
    inner = Writer().int64(1, 1)
    for _ in range(protobuf.NESTING_MAX + 2):
        inner = Writer().message(1, inner)
    fields = parse(inner.finish(), "t")
    with pytest.raises(ProtocolError, match="nested deeper"):
        for _ in range(protobuf.NESTING_MAX + 2):
            sub = fields.message(1, "sub")
            assert sub is not None
            fields = sub


def test_group_nesting_is_bounded() -> None:
    depth = protobuf.NESTING_MAX + 2
    data = bytes.fromhex("0b" * depth + "0c" * depth)
    with pytest.raises(ProtocolError, match="nested deeper"):
        parse(data, "t")


def test_field_count_is_bounded() -> None:
    data = bytes.fromhex("0800") * (protobuf.FIELDS_MAX + 1)
    with pytest.raises(ProtocolError, match="more than"):
        parse(data, "t")


def test_message_size_is_bounded() -> None:
    with pytest.raises(ProtocolError, match="the limit is"):
        parse(bytes(protobuf.MESSAGE_BYTES_MAX + 1), "t")


def test_required_names_the_missing_field() -> None:
    fields = parse(b"", "ReadResponse")
    with pytest.raises(ProtocolError, match=r"ReadResponse: required field ledgerId \(2\)"):
        fields.required(fields.int64(2), 2, "ledgerId")


def _read_everything(data: bytes) -> None:
    """Parse and read every field every way a codec might (all must raise only ProtocolError)."""
    fields = parse(data, "t")
    for number in range(1, 20):
        for getter in (fields.int64, fields.uint32, fields.binary, fields.string):
            with contextlib.suppress(ProtocolError):
                getter(number)
        try:
            fields.message(number, "sub")
            fields.repeated_messages(number, "sub")
            fields.repeated_strings(number)
        except ProtocolError:
            pass


@given(st.binary(max_size=400))
def test_arbitrary_bytes_give_fields_or_protocol_error(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        _read_everything(data)
