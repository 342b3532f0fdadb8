"""The validation layer over the protobuf package (ledger/codecs/message_codec.py).

upb parses whatever is wire-valid; this layer must turn every message BookKeeper's schema does
not allow into a ProtocolError naming the field and the value, accept the layouts proto2 allows
(any field order, merged embedded messages, unknown fields, last scalar wins), and never let
another exception out. Golden bytes and round trips are in test_ledger_frames.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import struct

import crc32c
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ledger.codecs import message_codec
from ledger.codecs.entry import ENTRY_HEADER_BYTES, DigestType, Entry, EntryCodec
from ledger.codecs.frames import AddFrames, FrameDecoder, encode_request, frame
from ledger.codecs.message_codec import (
    decode_request_message,
    decode_response_message,
    encode_response_message,
)
from ledger.codecs.messages import AddRequest, AddResponse, ReadResponse, Response
from ledger.codecs.proto import bookkeeper_pb2 as pb
from ledger.codes import OperationType, StatusCode
from ledger.errors import ProtocolError
from tests.support.wire import WIRE_GROUP_END, WIRE_GROUP_START, Writer

pytestmark = pytest.mark.unit

U64_MAX = 2**64 - 1
# Values at both sides of every varint length, and the extremes.
EDGES = sorted({0, 1, U64_MAX} | {(1 << (7 * n)) + d for n in range(1, 10) for d in (-1, 0)})
UINT64 = st.sampled_from(EDGES) | st.integers(min_value=0, max_value=U64_MAX)
INT64 = st.sampled_from([v for v in EDGES if v < 2**63] + [-1, -2, -(2**63)]) | st.integers(
    min_value=-(2**63), max_value=2**63 - 1
)
INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
KEY = st.just(hashlib.sha1(b"ledgerpw").digest()) | st.binary(max_size=40)
ADDS = st.builds(
    AddRequest,
    UINT64,
    INT64,
    INT64,
    KEY,
    st.binary(max_size=300),
    st.booleans(),
    st.none() | INT32,
    st.just(0) | st.integers(min_value=0, max_value=2**32 - 1),
)
HOT_RESPONSES = st.builds(AddResponse, UINT64, st.sampled_from(StatusCode), INT64, INT64) | (
    st.builds(
        ReadResponse,
        UINT64,
        st.sampled_from(StatusCode),
        INT64,
        INT64,
        st.none() | st.binary(max_size=300),
        st.none() | INT64,
        st.none() | INT64,
    )
)


def _header(op: OperationType, txn: int) -> Writer:
    return Writer().uint(1, 3).uint(2, op).uint(3, txn)


def _add_body(status: int = StatusCode.EOK) -> Writer:
    return Writer().uint(1, status).int64(2, 12).int64(3, 3)


def _add_response(header: Writer, status: int = 0, body: Writer | None = None) -> bytes:
    return (
        Writer()
        .message(1, header)
        .uint(2, status)
        .message(101, _add_body() if body is None else body)
        .finish()
    )


# ------------------------------------------------------------------------------ encoding


@given(ADDS, UINT64)
def test_an_entrys_frames_for_any_txn_id_are_its_request_frame(
    request: AddRequest, txn_id: int
) -> None:
    frames = AddFrames(request)
    for txn in (request.txn_id, txn_id, 0, 127, 128, request.txn_id):
        retxn = AddRequest(
            txn,
            request.ledger_id,
            request.entry_id,
            request.master_key,
            request.body,
            request.recovery,
            request.write_flags,
            request.priority,
        )
        assert b"".join(frames.pieces(txn)) == encode_request(retxn)


# ------------------------------------------------------------------- what the layer refuses


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (Writer().uint(2, 0), "Response: required field header (1) is missing"),
        (
            Writer().message(1, Writer().uint(1, 3).uint(2, 2)).uint(2, 0),
            "Response header: required field txnId (3) is missing",
        ),
        (
            Writer().message(1, Writer().uint(2, 2).uint(3, 1)).uint(2, 0),
            "Response header: required field version (1) is missing",
        ),
        (
            Writer().message(1, Writer().uint(1, 7).uint(2, 2).uint(3, 1)).uint(2, 0),
            "Response header: version is 7, not a known ProtocolVersion",
        ),
        (
            Writer().message(1, _header(OperationType.ADD_ENTRY, 1).uint(2, 77)).uint(2, 0),
            "Response header: operation is 77, not a known OperationType",
        ),
        (
            Writer().message(1, _header(OperationType.ADD_ENTRY, 4)),
            "Response ADD_ENTRY txn 4: required field status (2) is missing",
        ),
        (
            Writer().message(1, _header(OperationType.ADD_ENTRY, 4)).uint(2, 999),
            "Response ADD_ENTRY txn 4: status is 999, not a known StatusCode",
        ),
        (
            Writer()
            .message(1, _header(OperationType.ADD_ENTRY, 4))
            .uint(2, 0)
            .message(101, Writer().uint(1, 0).int64(3, 3)),
            "Response ADD_ENTRY txn 4 body: required field ledgerId (2) is missing",
        ),
        (
            Writer().message(1, _header(OperationType.ADD_ENTRY, 4)).uint(2, 0),
            "Response ADD_ENTRY txn 4: status EOK but no ADD_ENTRY response body",
        ),
        (
            Writer()
            .message(1, _header(OperationType.AUTH, 4))
            .uint(2, 0)
            .message(102, Writer().binary(1, b"\xff\xfe").binary(2, b"")),
            "Response AUTH txn 4 body: authPluginName is not valid UTF-8",
        ),
        (
            Writer().raw(b"\x0a\x05\x08"),
            "Response: 3 bytes that do not parse as a Response message, from 0a0508",
        ),
        (
            Writer().raw(b"\x00\x01"),
            "Response: 2 bytes that do not parse as a Response message, from 0001",
        ),
    ],
)
def test_malformed_responses_name_the_problem(message: Writer, expected: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        decode_response_message(message.finish())
    assert str(caught.value).startswith(expected), str(caught.value)


def test_an_unknown_inner_status_is_an_error_even_when_overridden() -> None:
    data = _add_response(
        _header(OperationType.ADD_ENTRY, 7), StatusCode.EFENCED, _add_body(status=999)
    )
    with pytest.raises(ProtocolError, match="body: status is 999, not a known StatusCode"):
        decode_response_message(data)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (Writer().int64(2, 1).binary(3, b"k").binary(4, b"e"), r"ledgerId \(1\) is missing"),
        (
            Writer().int64(1, 5).int64(2, 1).binary(3, b"k").binary(4, b"e").uint(100, 9),
            "unknown AddRequest flag 9",
        ),
    ],
)
def test_malformed_requests_name_the_problem(body: Writer, expected: str) -> None:
    data = Writer().message(1, _header(OperationType.ADD_ENTRY, 2)).message(101, body).finish()
    with pytest.raises(ProtocolError, match=expected):
        decode_request_message(data)


def test_a_read_flag_outside_the_enum_is_named() -> None:
    body = Writer().int64(1, 5).int64(2, 1).uint(100, 3)
    data = Writer().message(1, _header(OperationType.READ_ENTRY, 2)).message(100, body).finish()
    with pytest.raises(ProtocolError, match="flag is 3, not a known ReadFlag"):
        decode_request_message(data)


def test_deeply_nested_unknown_groups_are_a_protocol_error_not_a_crash() -> None:
    depth = 200
    nested = b"".join(Writer().tag(9, WIRE_GROUP_START).finish() for _ in range(depth)) + b"".join(
        Writer().tag(9, WIRE_GROUP_END).finish() for _ in range(depth)
    )
    data = _add_response(_header(OperationType.ADD_ENTRY, 1)) + nested
    with pytest.raises(ProtocolError, match="do not parse"):
        decode_response_message(data)


# ----------------------------------------------------------- what proto2 allows, accepted


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # the body before the status
        (
            Writer()
            .message(1, _header(OperationType.ADD_ENTRY, 7))
            .message(101, _add_body())
            .uint(2, 0),
            AddResponse(7, StatusCode.EOK, 12, 3),
        ),
        # unknown fields of every wire type, groups included
        (
            Writer()
            .message(1, _header(OperationType.ADD_ENTRY, 7))
            .uint(2, 0)
            .message(101, _add_body())
            .uint(999, 1)
            .tag(998, 1)
            .raw(bytes(8))
            .tag(997, 5)
            .raw(bytes(4))
            .binary(996, b"xyz")
            .tag(995, WIRE_GROUP_START)
            .uint(1, 5)
            .tag(995, WIRE_GROUP_END),
            AddResponse(7, StatusCode.EOK, 12, 3),
        ),
        # the body in two parts, which proto2 merges
        (
            Writer()
            .message(1, _header(OperationType.ADD_ENTRY, 7))
            .uint(2, 0)
            .message(101, Writer().uint(1, 0).int64(2, 12))
            .message(101, Writer().int64(3, 3)),
            AddResponse(7, StatusCode.EOK, 12, 3),
        ),
        # a status as a 64-bit varint, which int32 reduces to EFENCED
        (
            Writer()
            .message(1, _header(OperationType.ADD_ENTRY, 7))
            .uint(2, 2**32 + StatusCode.EFENCED)
            .message(101, _add_body()),
            AddResponse(7, StatusCode.EFENCED, 12, 3),
        ),
        # a repeated scalar: the last one wins
        (
            Writer()
            .message(1, _header(OperationType.READ_ENTRY, 7))
            .uint(2, 0)
            .message(100, Writer().uint(1, 0).int64(2, 1).int64(3, 2).int64(5, 4).int64(5, 6)),
            ReadResponse(7, StatusCode.EOK, 1, 2, max_lac=6),
        ),
        # a priority in the header: legal in any BKPacketHeader, read and ignored
        (
            Writer()
            .message(1, _header(OperationType.ADD_ENTRY, 7).uint(4, 9))
            .uint(2, 0)
            .message(101, _add_body()),
            AddResponse(7, StatusCode.EOK, 12, 3),
        ),
        # a field with the wrong wire type counts as unknown, as in protobuf-java: the read's
        # body sent as a varint is no body
        (
            Writer()
            .message(1, _header(OperationType.READ_ENTRY, 7))
            .uint(2, 0)
            .message(100, Writer().uint(1, 0).int64(2, 1).int64(3, 2).uint(4, 5)),
            ReadResponse(7, StatusCode.EOK, 1, 2),
        ),
    ],
)
def test_valid_but_unusual_layouts_decode_alike(message: Writer, expected: Response) -> None:
    assert decode_response_message(message.finish()) == expected


def test_a_required_field_with_the_wrong_wire_type_is_missing() -> None:
    body = Writer().uint(1, 0).binary(2, b"12").int64(3, 3)  # ledgerId as bytes
    data = Writer().message(1, _header(OperationType.ADD_ENTRY, 7)).uint(2, 0).message(101, body)
    with pytest.raises(ProtocolError, match=r"required field ledgerId \(2\) is missing"):
        decode_response_message(data.finish())


@given(st.binary(max_size=200))
@example(bytes.fromhex("0a06080310021807"))  # a header alone: status missing
@example(bytes.fromhex("0a060803100218071000aa0600"))  # EOK with an empty body
def test_arbitrary_bytes_give_a_response_or_a_protocol_error(data: bytes) -> None:
    try:
        response = decode_response_message(data)
    except ProtocolError:
        return
    assert decode_response_message(encode_response_message(response)) == response


@given(HOT_RESPONSES, st.data())
def test_mutated_responses_give_a_response_or_a_protocol_error(
    response: Response, data: st.DataObject
) -> None:
    encoded = bytearray(encode_response_message(response))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(encoded) - 1))
        encoded[at] = data.draw(st.integers(0, 255))
    with contextlib.suppress(ProtocolError):
        decode_response_message(bytes(encoded))


# -------------------------------------------------------------------------------- frames


@given(st.lists(HOT_RESPONSES, min_size=1, max_size=4), st.integers(0, 64))
def test_frames_decode_alike_from_bytes_bytearray_and_memoryview(
    responses: list[Response], cut: int
) -> None:
    stream = b"".join(frame(encode_response_message(r)) for r in responses)
    cut = min(cut, len(stream))
    for kind in (bytes, bytearray, memoryview):
        decoder = FrameDecoder()
        got = decoder.feed(kind(stream[:cut]))  # type: ignore[arg-type]
        got += decoder.feed(kind(stream[cut:]))  # type: ignore[arg-type]
        assert got == responses
        assert decoder.buffered_bytes == 0


def test_a_fed_bytearray_is_not_pinned_even_after_an_error() -> None:
    good = frame(encode_response_message(AddResponse(1, StatusCode.EOK, 2, 3)))
    bad = frame(b"\x0a\x01")  # header truncated
    for chunk in (bytearray(good), bytearray(good[:7]), bytearray(bad)):
        decoder = FrameDecoder()
        try:
            decoder.feed(chunk)  # type: ignore[arg-type]
        except ProtocolError as err:
            assert chunk == bad, err
        chunk.clear()  # BufferError if the decoder still held a view of it


# -------------------------------------------------------------------------------- entries


@given(
    st.integers(min_value=0, max_value=2**63 - 1),
    st.integers(min_value=0, max_value=2**63 - 1),
    INT64,
    INT64,
    st.binary(max_size=300),
)
def test_crc32c_entries_match_an_independent_computation(
    ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes
) -> None:
    codec = EntryCodec(ledger_id, DigestType.CRC32C, b"pw")
    header = struct.pack(">qqqq", ledger_id, entry_id, lac, length)
    expected = header + crc32c.crc32c(header + payload).to_bytes(4, "big") + payload
    assert codec.encode_entry(entry_id, lac, length, payload) == expected
    entry = Entry(ledger_id, entry_id, lac, length, payload)
    for packet in (expected, memoryview(expected)):
        decoded = codec.decode_entry(packet, entry_id)  # type: ignore[arg-type]
        assert decoded == entry
        assert type(decoded.payload) is bytes
    assert len(expected) == ENTRY_HEADER_BYTES + 4 + len(payload)


@given(HOT_RESPONSES, st.data())
def test_the_hot_path_returns_what_the_full_decoder_returns(
    response: Response, data: st.DataObject
) -> None:
    encoded = bytearray(encode_response_message(response))
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(encoded) - 1))
        encoded[at] = data.draw(st.integers(0, 255))
    try:
        decoded = decode_response_message(bytes(encoded))
    except ProtocolError:
        return
    message = pb.Response()
    message.ParseFromString(bytes(encoded))
    op, txn, _ = message_codec._header(message, "Response")
    assert message_codec._decode_response(message, op, txn) == decoded
