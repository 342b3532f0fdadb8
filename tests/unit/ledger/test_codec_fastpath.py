"""The codec fast paths agree with the generic path: same bytes out, same objects in.

The generic path (ledger.codecs.message_codec.generic_*, on ledger.codecs.protobuf) carries the golden
vectors of test_ledger_frames.py; here every fast path is checked against it on generated
messages, on ids at every varint length, and on mutated and non-canonical input, where the
fast decoder must either agree with the generic one or step aside (return None).
"""

from __future__ import annotations

import hashlib
import struct

import crc32c
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ledger.codecs.codec_fastpath import AddFrames, decode_response, int64, uvarint
from ledger.codecs.entry import ENTRY_HEADER_BYTES, DigestType, Entry, EntryCodec
from ledger.codecs.frames import FrameDecoder, encode_request, frame
from ledger.codecs.message_codec import (
    decode_response_message,
    encode_request_message,
    encode_request_pieces,
    encode_response_message,
    generic_decode_response_message,
    generic_encode_request_message,
)
from ledger.codecs.messages import AddRequest, AddResponse, ReadRequest, ReadResponse, Response
from ledger.codecs.protobuf import MESSAGE_BYTES_MAX, Writer, encode_varint
from ledger.codes import OperationType, ReadFlag, StatusCode
from ledger.errors import ProtocolError

pytestmark = pytest.mark.unit

U64_MAX = 2**64 - 1
# Values at both sides of every varint length, and the extremes, for unsigned and int64 fields.
EDGES = sorted({0, 1, U64_MAX} | {(1 << (7 * n)) + d for n in range(1, 10) for d in (-1, 0)})
UINT64 = st.sampled_from(EDGES) | st.integers(min_value=0, max_value=U64_MAX)
INT64 = (
    st.sampled_from([v for v in EDGES if v < 2**63] + [-1, -2, -(2**63)])
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.integers(min_value=-1000, max_value=1_000_000)
)
INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
PRIORITY = st.just(0) | st.integers(min_value=0, max_value=2**32 - 1)
BLOB = st.binary(max_size=300)
KEY = st.just(hashlib.sha1(b"ledgerpw").digest()) | st.binary(max_size=40)
STATUS = st.sampled_from(StatusCode)

ADDS = st.builds(
    AddRequest, UINT64, INT64, INT64, KEY, BLOB, st.booleans(), st.none() | INT32, PRIORITY
)
READS = st.one_of(
    st.builds(
        ReadRequest,
        UINT64,
        INT64,
        INT64,
        st.none() | st.just(ReadFlag.FENCE_LEDGER),
        KEY,
        st.none() | INT64,
        st.none(),
        PRIORITY,
    ),
    st.builds(ReadRequest, UINT64, INT64, INT64, st.none(), st.none() | KEY, st.none() | INT64),
    st.builds(
        ReadRequest,
        UINT64,
        INT64,
        st.just(-1),
        st.none() | st.just(ReadFlag.ENTRY_PIGGYBACK),
        st.none() | KEY,
        INT64,
        st.none() | INT64,
        PRIORITY,
    ),
)
ADD_RESPONSES = st.builds(AddResponse, UINT64, STATUS, INT64, INT64)
READ_RESPONSES = st.builds(
    ReadResponse,
    UINT64,
    STATUS,
    INT64,
    INT64,
    st.none() | BLOB,
    st.none() | INT64,
    st.none() | INT64,
)
HOT_RESPONSES = ADD_RESPONSES | READ_RESPONSES


# ------------------------------------------------------------------------------ encoding


@given(UINT64)
def test_uvarint_is_encode_varint(value: int) -> None:
    assert uvarint(value) == encode_varint(value)


@given(INT64)
def test_int64_is_the_twos_complement_varint(value: int) -> None:
    assert int64(value) == encode_varint(value & U64_MAX)


@given(ADDS | READS)
def test_fast_request_encoding_gives_the_generic_bytes(request: AddRequest | ReadRequest) -> None:
    generic = generic_encode_request_message(request)
    assert encode_request_message(request) == generic
    assert encode_request(request) == frame(generic)


@given(ADDS)
def test_the_entry_body_is_passed_through_uncopied(request: AddRequest) -> None:
    head, body, tail = encode_request_pieces(request)
    assert body is request.body
    assert head + body + tail == generic_encode_request_message(request)


@given(ADDS, UINT64)
def test_an_entrys_frames_for_any_txn_id_are_its_request_frame(
    request: AddRequest, txn_id: int
) -> None:
    frames = AddFrames(request)
    for txn in (request.txn_id, txn_id, 0, 127, 128):
        pieces = frames.pieces(txn)
        assert pieces[1] is request.body  # not copied
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
        assert b"".join(pieces) == encode_request(retxn)


@pytest.mark.parametrize(
    "read",
    [
        ReadRequest(1, 2, 3, flag=ReadFlag.FENCE_LEDGER),
        ReadRequest(1, 2, -1, flag=ReadFlag.ENTRY_PIGGYBACK),
        ReadRequest(1, 2, -1, timeout_ms=1000),
    ],
)
def test_the_fast_path_keeps_the_read_checks(read: ReadRequest) -> None:
    with pytest.raises(AssertionError):
        encode_request_message(read)


# ------------------------------------------------------------------------------ decoding


@given(HOT_RESPONSES)
def test_fast_decoding_takes_every_canonical_response(response: Response) -> None:
    data = encode_response_message(response)
    for view in (data, memoryview(data), memoryview(b"xyz" + data)[3:]):
        assert decode_response(view) == response
    assert generic_decode_response_message(data) == response


def _agrees_or_steps_aside(data: bytes) -> None:
    """The fast decoder never raises; when it answers, the generic decoder gives the same."""
    fast = decode_response(data)
    if fast is None:
        return
    assert fast == generic_decode_response_message(data)
    assert decode_response_message(data) == fast


@given(HOT_RESPONSES, st.data())
def test_mutated_responses_agree_or_step_aside(response: Response, data: st.DataObject) -> None:
    encoded = bytearray(encode_response_message(response))
    for _ in range(data.draw(st.integers(1, 4))):
        edit = data.draw(st.sampled_from(["set", "insert", "delete", "cut"]))
        index = data.draw(st.integers(0, max(0, len(encoded) - 1)))
        if edit == "set" and encoded:
            encoded[index] = data.draw(st.integers(0, 255))
        elif edit == "insert":
            encoded.insert(index, data.draw(st.integers(0, 255)))
        elif edit == "delete" and encoded:
            del encoded[index]
        else:
            del encoded[index:]
    _agrees_or_steps_aside(bytes(encoded))


@given(st.binary(max_size=200))
@example(bytes.fromhex("0a06080310021807"))  # a header alone: status missing
@example(bytes.fromhex("0a060803100218071000aa0600"))  # EOK with an empty body
def test_arbitrary_bytes_agree_or_step_aside(data: bytes) -> None:
    _agrees_or_steps_aside(data)


def _header(op: OperationType, txn: int) -> Writer:
    return Writer().uint(1, 3).uint(2, op).uint(3, txn)


def _add_body(status: StatusCode = StatusCode.EOK) -> Writer:
    return Writer().uint(1, status).int64(2, 12).int64(3, 3)


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
        # an unknown field after the body
        (
            Writer()
            .message(1, _header(OperationType.ADD_ENTRY, 7))
            .uint(2, 0)
            .message(101, _add_body())
            .uint(999, 1),
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
    ],
)
def test_valid_but_unusual_layouts_take_the_generic_path(
    message: Writer, expected: Response
) -> None:
    data = message.finish()
    assert decode_response(data) is None
    assert decode_response_message(data) == expected


def test_a_priority_in_the_header_is_read_and_ignored_by_both_paths() -> None:
    # A bookie does not send one back, but the field is legal in any BKPacketHeader.
    data = (
        Writer()
        .message(1, _header(OperationType.ADD_ENTRY, 7).uint(4, 9))
        .uint(2, 0)
        .message(101, _add_body())
        .finish()
    )
    expected = AddResponse(7, StatusCode.EOK, 12, 3)
    assert decode_response(data) == generic_decode_response_message(data) == expected


def test_an_unknown_inner_status_is_an_error_even_when_overridden() -> None:
    data = (
        Writer()
        .message(1, _header(OperationType.ADD_ENTRY, 7))
        .uint(2, StatusCode.EFENCED)
        .message(101, Writer().uint(1, 999).int64(2, 12).int64(3, 3))
        .finish()
    )
    assert decode_response(data) is None
    with pytest.raises(ProtocolError, match="not a known StatusCode"):
        decode_response_message(data)


def test_oversize_messages_are_left_to_the_generic_path() -> None:
    data = bytes(MESSAGE_BYTES_MAX + 1)
    assert decode_response(data) is None
    with pytest.raises(ProtocolError, match="the limit is"):
        decode_response_message(data)


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
