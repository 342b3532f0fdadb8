"""v3 requests and responses in frames: golden bytes, round trips, and bad streams.

The golden frames below were built by hand from BookkeeperProtocol.proto (tags annotated) and
were checked byte for byte against BookKeeper 4.17.2's protobuf-java classes.
"""

from __future__ import annotations

import contextlib
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import errors
from ledger.codecs.frames import (
    FRAME_BYTES_MAX,
    FrameDecoder,
    RequestFrameDecoder,
    encode_request,
    encode_response,
    frame,
)
from ledger.codecs.messages import (
    AddRequest,
    AddResponse,
    AuthRequest,
    AuthResponse,
    ForceLedgerRequest,
    ForceLedgerResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    StatusOnlyResponse,
    WriteLacRequest,
    WriteLacResponse,
    response_error,
)
from ledger.codes import OperationType, ReadFlag, StatusCode
from ledger.errors import FrameTooLargeError, ProtocolError
from tests.support.wire import Writer

pytestmark = pytest.mark.unit

MASTER_KEY = hashlib.sha1(b"ledgerpw").digest()

# AddRequest{ledgerId 12, entryId 3, masterKey, body "hello"}, txn 7.
GOLDEN_ADD = bytes.fromhex(
    "0000002c"  # frame length 44
    "0a06"
    "0803"
    "1002"
    "1807"  # 1: header {version 3, operation ADD_ENTRY (2), txnId 7}
    "aa0621"  # 101: addRequest, 33 bytes (tag 101<<3|2 = 0x32a → aa 06)
    "080c"
    "1003"  # ledgerId 12, entryId 3
    "1a14"
    + MASTER_KEY.hex()  # masterKey, 20 bytes
    + "220568656c6c6f"  # body "hello"
)
# ReadRequest long poll {ledgerId 12, entryId -1, previousLAC 5, timeOut 1000, flag
# ENTRY_PIGGYBACK}, txn 11: fields in number order, so flag (100) comes last.
GOLDEN_LONG_POLL = bytes.fromhex(
    "00000020"  # frame length 32
    "0a06"
    "0803"
    "1001"
    "180b"  # header {3, READ_ENTRY (1), txnId 11}
    "a20615"  # 100: readRequest, 21 bytes
    "080c"
    "10ffffffffffffffffff01"  # ledgerId 12, entryId -1 (10-byte varint)
    "2005"
    "28e807"  # previousLAC 5, timeOut 1000
    "a00602"  # flag (field 100, varint) ENTRY_PIGGYBACK
)
# Response{header, status EFENCED, addResponse{EFENCED, ledger 12, entry 3}}, txn 7.
GOLDEN_ADD_FENCED = bytes.fromhex(
    "00000015"  # frame length 21
    "0a06"
    "0803"
    "1002"
    "1807"  # header
    "10f803"  # 2: status 504 (EFENCED)
    "aa0607"
    "08f803"
    "100c"
    "1803"  # 101: addResponse (7 bytes){504, ledger 12, entry 3}
)


def test_golden_add_request() -> None:
    request = AddRequest(txn_id=7, ledger_id=12, entry_id=3, master_key=MASTER_KEY, body=b"hello")
    assert encode_request(request) == GOLDEN_ADD
    assert RequestFrameDecoder().feed(GOLDEN_ADD) == [request]


def test_golden_long_poll_read() -> None:
    request = ReadRequest(
        txn_id=11,
        ledger_id=12,
        entry_id=-1,
        flag=ReadFlag.ENTRY_PIGGYBACK,
        previous_lac=5,
        timeout_ms=1000,
    )
    assert encode_request(request) == GOLDEN_LONG_POLL
    assert RequestFrameDecoder().feed(GOLDEN_LONG_POLL) == [request]


def test_golden_fenced_add_response() -> None:
    response = AddResponse(txn_id=7, status=StatusCode.EFENCED, ledger_id=12, entry_id=3)
    assert encode_response(response) == GOLDEN_ADD_FENCED
    assert FrameDecoder().feed(GOLDEN_ADD_FENCED) == [response]
    assert isinstance(response_error(response), errors.FencedError)


@pytest.mark.parametrize(
    "read",
    [
        ReadRequest(1, 2, 3, flag=ReadFlag.FENCE_LEDGER),
        ReadRequest(1, 2, -1, flag=ReadFlag.ENTRY_PIGGYBACK),
        ReadRequest(1, 2, 7, flag=ReadFlag.ENTRY_PIGGYBACK, previous_lac=6),
        ReadRequest(1, 2, -1, previous_lac=None, timeout_ms=1000),
    ],
)
def test_reads_a_bookie_would_refuse_are_programming_errors(read: ReadRequest) -> None:
    with pytest.raises(AssertionError):
        encode_request(read)


def test_priority_is_written_only_when_set() -> None:
    plain = encode_request(ReadLacRequest(txn_id=1, ledger_id=2))
    urgent = encode_request(ReadLacRequest(txn_id=1, ledger_id=2, priority=100))
    assert b"\x20\x64" not in plain[4:12] and b"\x20\x64" in urgent[4:14]  # header field 4


# ---------------------------------------------------------------------------- round trips

TXN = st.integers(min_value=0, max_value=2**64 - 1)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
BLOB = st.binary(max_size=64)
STATUS = st.sampled_from(StatusCode)
PRIORITY = st.integers(min_value=0, max_value=2**32 - 1)

REQUESTS: st.SearchStrategy[Request] = st.one_of(
    st.builds(
        AddRequest, TXN, INT64, INT64, BLOB, BLOB, st.booleans(), st.none() | INT32, PRIORITY
    ),
    st.builds(
        ReadRequest,
        TXN,
        INT64,
        INT64,
        st.none() | st.just(ReadFlag.FENCE_LEDGER),
        BLOB,
        st.none() | INT64,
        st.none(),
        PRIORITY,
    ),
    st.builds(
        ReadRequest,
        TXN,
        INT64,
        st.just(-1),
        st.none() | st.just(ReadFlag.ENTRY_PIGGYBACK),
        st.none() | BLOB,
        INT64,
        st.none() | INT64,
        PRIORITY,
    ),
    st.builds(WriteLacRequest, TXN, INT64, INT64, BLOB, BLOB, PRIORITY),
    st.builds(ReadLacRequest, TXN, INT64, PRIORITY),
    st.builds(GetBookieInfoRequest, TXN, INT64, PRIORITY),
    st.builds(ForceLedgerRequest, TXN, INT64, PRIORITY),
    st.builds(AuthRequest, TXN, st.text(max_size=20), BLOB, PRIORITY),
)
RESPONSES: st.SearchStrategy[Response] = st.one_of(
    st.builds(AddResponse, TXN, STATUS, INT64, INT64),
    st.builds(
        ReadResponse,
        TXN,
        STATUS,
        INT64,
        INT64,
        st.none() | BLOB,
        st.none() | INT64,
        st.none() | INT64,
    ),
    st.builds(WriteLacResponse, TXN, STATUS, INT64),
    st.builds(ReadLacResponse, TXN, STATUS, INT64, st.none() | BLOB, st.none() | BLOB),
    st.builds(GetBookieInfoResponse, TXN, STATUS, st.none() | INT64, st.none() | INT64),
    st.builds(ForceLedgerResponse, TXN, STATUS, INT64),
    st.builds(AuthResponse, TXN, STATUS, st.text(max_size=20), BLOB),
    st.builds(
        StatusOnlyResponse,
        TXN,
        st.sampled_from(OperationType),
        STATUS.filter(lambda s: s is not StatusCode.EOK),
    ),
)


@given(REQUESTS)
def test_request_round_trip(request: Request) -> None:
    assert RequestFrameDecoder().feed(encode_request(request)) == [request]


@given(RESPONSES)
def test_response_round_trip(response: Response) -> None:
    assert FrameDecoder().feed(encode_response(response)) == [response]


@given(st.lists(RESPONSES, min_size=1, max_size=5), st.data())
def test_any_split_of_the_stream_gives_the_same_responses(
    responses: list[Response], data: st.DataObject
) -> None:
    stream = b"".join(encode_response(r) for r in responses)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = FrameDecoder()
    got: list[Response] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += decoder.feed(stream[start:end])
    assert got == responses
    assert decoder.buffered_bytes == 0


def test_a_partial_frame_waits_for_more_bytes() -> None:
    decoder = FrameDecoder()
    for split in (1, 3, 4, 10, len(GOLDEN_ADD_FENCED) - 1):
        decoder = FrameDecoder()
        assert decoder.feed(GOLDEN_ADD_FENCED[:split]) == []
        assert decoder.buffered_bytes == split
        assert len(decoder.feed(GOLDEN_ADD_FENCED[split:])) == 1


# -------------------------------------------------------------------- statuses and errors


def test_top_level_rejection_without_body_is_status_only() -> None:
    # What an authenticating bookie sends for a request before the handshake: header + EUA.
    message = (
        Writer()
        .message(1, Writer().uint(1, 3).uint(2, OperationType.ADD_ENTRY).uint(3, 9))
        .uint(2, StatusCode.EUA)
        .finish()
    )
    [response] = FrameDecoder().feed(frame(message))
    assert response == StatusOnlyResponse(9, OperationType.ADD_ENTRY, StatusCode.EUA)
    assert isinstance(response_error(response), errors.UnauthorizedError)


def test_top_level_status_overrides_the_inner_one() -> None:
    header = Writer().uint(1, 3).uint(2, OperationType.READ_ENTRY).uint(3, 1)
    inner = Writer().uint(1, StatusCode.EOK).int64(2, 5).int64(3, 6)
    message = Writer().message(1, header).uint(2, StatusCode.EIO).message(100, inner).finish()
    [response] = FrameDecoder().feed(frame(message))
    assert response == ReadResponse(1, StatusCode.EIO, 5, 6)


def test_ok_without_body_is_a_protocol_error() -> None:
    header = Writer().uint(1, 3).uint(2, OperationType.ADD_ENTRY).uint(3, 1)
    message = Writer().message(1, header).uint(2, StatusCode.EOK).finish()
    with pytest.raises(ProtocolError, match="status EOK but no ADD_ENTRY response body"):
        FrameDecoder().feed(frame(message))


def test_unsupported_request_operation_is_a_protocol_error() -> None:
    header = Writer().uint(1, 3).uint(2, OperationType.START_TLS).uint(3, 1)
    message = Writer().message(1, header).message(106, Writer()).finish()
    with pytest.raises(ProtocolError, match="START_TLS is not supported"):
        RequestFrameDecoder().feed(frame(message))


def test_every_error_status_has_exactly_one_error_class() -> None:
    for status in StatusCode:
        error = errors.status_error(status, "t")
        if status is StatusCode.EOK:
            assert error is None
            continue
        assert error is not None and error.status is status
        assert isinstance(error, errors.BookieError)
    retriable = {s for s, cls in errors.STATUS_ERRORS.items() if cls.retriable}
    assert retriable == {
        StatusCode.EIO,
        StatusCode.EREADONLY,
        StatusCode.ETOOMANYREQUESTS,
        StatusCode.EUNKNOWNLEDGERSTATE,
    }
    assert len(set(errors.STATUS_ERRORS.values())) == len(errors.STATUS_ERRORS)


# ------------------------------------------------------------------------------ bad streams


def test_oversize_frame_fails_at_its_length_and_poisons_the_decoder() -> None:
    decoder = FrameDecoder()
    announced = FRAME_BYTES_MAX - 3  # plus the 4 length bytes: one byte over the bound
    with pytest.raises(ProtocolError, match="the limit is"):
        decoder.feed(announced.to_bytes(4, "big"))
    with pytest.raises(ProtocolError):
        decoder.feed(GOLDEN_ADD_FENCED)  # a failed stream cannot resynchronise


def test_largest_allowed_frame_is_accepted_by_length() -> None:
    decoder = FrameDecoder()
    assert decoder.feed((FRAME_BYTES_MAX - 4).to_bytes(4, "big") + b"\x00") == []


def test_negative_length_is_rejected() -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(b"\xff\xff\xff\xff")


def test_empty_frame_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="header"):
        FrameDecoder().feed(b"\x00\x00\x00\x00")


def test_encode_refuses_frames_a_bookie_would_refuse() -> None:
    big = AddRequest(1, 1, 1, MASTER_KEY, bytes(FRAME_BYTES_MAX))
    with pytest.raises(FrameTooLargeError, match="the limit is"):
        encode_request(big)
    assert len(encode_request(AddRequest(1, 1, 1, MASTER_KEY, b"x"), 100)) < 100


@given(st.binary(max_size=300))
def test_arbitrary_bytes_give_messages_or_protocol_error(data: bytes) -> None:
    for decoder in (FrameDecoder(), RequestFrameDecoder()):
        with contextlib.suppress(ProtocolError):
            decoder.feed(data)


@given(st.binary(max_size=300))
def test_arbitrary_framed_bodies_give_messages_or_protocol_error(body: bytes) -> None:
    for decoder in (FrameDecoder(), RequestFrameDecoder()):
        with contextlib.suppress(ProtocolError):
            assert len(decoder.feed(frame(body))) == 1


@given(RESPONSES, st.data())
def test_mutated_frames_give_messages_or_protocol_error(
    response: Response, data: st.DataObject
) -> None:
    encoded = bytearray(encode_response(response))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(4, len(encoded) - 1))  # keep the length: test the body
        encoded[index] = data.draw(st.integers(0, 255))
    with contextlib.suppress(ProtocolError):
        FrameDecoder().feed(bytes(encoded))


@given(REQUESTS, st.data())
def test_truncated_frames_wait_for_more(request: Request, data: st.DataObject) -> None:
    encoded = encode_request(request)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    decoder = RequestFrameDecoder()
    assert decoder.feed(encoded[:cut]) == []
    assert decoder.feed(encoded[cut:]) == [request]
