"""Batched reads in BookKeeper's v2 protocol: golden bytes, round trips and bad streams.

The golden frames are laid out by hand from the v2 request and response formats of BookKeeper
4.17 (docs/wire-protocol.md); the integration tests read real bookies with the same codec.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.codecs.batch_codec import (
    V2_STATUS,
    BatchReadDecoder,
    BatchReadRequest,
    BatchReadResponse,
    decode_batch_read_response,
    encode_batch_read,
    encode_batch_read_response,
)
from ledger.codes import OperationType, StatusCode
from ledger.errors import FrameTooLargeError, ProtocolError


def _i64(value: int) -> bytes:
    return value.to_bytes(8, "big", signed=True)


def test_golden_request() -> None:
    frame = encode_batch_read(BatchReadRequest(3, 1, 2, 4, 5))
    assert frame == (
        b"\x00\x00\x00\x28"  # 40 bytes follow
        + b"\x02\x07\x00\x00"  # version 2, opcode 7 (batch read), no flags
        + _i64(1)  # ledger id
        + _i64(2)  # first entry id
        + _i64(3)  # request id
        + b"\x00\x00\x00\x04"  # max count
        + _i64(5)  # max size
    )


def test_golden_response_with_two_entries() -> None:
    body = (
        b"\x02\x07\x00\x00"
        + b"\x00\x00\x00\x00"  # EOK
        + _i64(9)
        + _i64(100)
        + _i64(77)
        + b"\x00\x00\x00\x03abc"
        + b"\x00\x00\x00\x00"  # an empty entry packet is still an entry
    )
    response = decode_batch_read_response(body)
    assert response == BatchReadResponse(77, StatusCode.EOK, 9, 100, (b"abc", b""))
    assert response.operation is OperationType.BATCH_READ_ENTRY
    assert encode_batch_read_response(response) == len(body).to_bytes(4, "big") + body


def test_golden_error_response_maps_the_v2_code() -> None:
    body = b"\x02\x07\x00\x00" + b"\x00\x00\x00\x02" + _i64(9) + _i64(100) + _i64(5)
    response = decode_batch_read_response(body)
    assert response.status is StatusCode.ENOENTRY and response.entries == ()


def test_every_v2_status_maps_to_a_distinct_v3_status() -> None:
    assert len(set(V2_STATUS.values())) == len(V2_STATUS)
    assert V2_STATUS[0] is StatusCode.EOK and V2_STATUS[107] is StatusCode.EUNKNOWNLEDGERSTATE


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\x02\x07\x00\x00", "expected at least 32"),
        (b"\x03\x07\x00\x00" + bytes(28), "got version 3 opcode 7"),
        (b"\x02\x02\x00\x00" + bytes(28), "got version 2 opcode 2"),
        (b"\x02\x07\x00\x00\x00\x00\x00\x63" + bytes(24), "unknown status code 99"),
        (b"\x02\x07\x00\x00" + bytes(28) + b"\x00\x00", "too few for an entry length"),
        (b"\x02\x07\x00\x00" + bytes(28) + b"\x00\x00\x00\x09abc", "announces 9 bytes; 3 remain"),
        (b"\x02\x07\x00\x00" + bytes(28) + b"\xff\xff\xff\xff", "announces -1 bytes"),
        (
            b"\x02\x07\x00\x00\x00\x00\x00\x02" + bytes(24) + b"\x00\x00\x00\x01x",
            "ENOENTRY with 1 entries",
        ),
        (b"\x02\x07\x00\x00" + bytes(4) + _i64(-1) + bytes(16), "negative ledger -1"),
    ],
)
def test_malformed_responses_say_what_was_received(body: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode_batch_read_response(body)


def test_requests_a_bookie_cannot_take_are_programming_errors() -> None:
    with pytest.raises(AssertionError):
        BatchReadRequest(1, 1, 0, 0, 100)  # no entries asked for
    with pytest.raises(AssertionError):
        BatchReadRequest(1, 1, -1, 1, 100)
    with pytest.raises(FrameTooLargeError):
        encode_batch_read(BatchReadRequest(1, 1, 0, 1, 1), frame_bytes_max=40)


RESPONSES = st.builds(
    BatchReadResponse,
    txn_id=st.integers(0, (1 << 63) - 1),
    status=st.just(StatusCode.EOK),
    ledger_id=st.integers(0, (1 << 63) - 1),
    first_entry_id=st.integers(0, (1 << 63) - 1),
    entries=st.lists(st.binary(max_size=64), max_size=6).map(tuple),
) | st.builds(
    BatchReadResponse,
    txn_id=st.integers(0, (1 << 63) - 1),
    status=st.sampled_from(sorted(set(V2_STATUS.values()) - {StatusCode.EOK})),
    ledger_id=st.integers(0, 1 << 40),
    first_entry_id=st.integers(0, 1 << 40),
    entries=st.just(()),
)


@given(st.lists(RESPONSES, min_size=1, max_size=4), st.data())
def test_any_split_of_the_stream_gives_the_same_responses(
    responses: list[BatchReadResponse], data: st.DataObject
) -> None:
    stream = b"".join(encode_batch_read_response(r) for r in responses)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    decoder = BatchReadDecoder()
    got: list[BatchReadResponse] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += decoder.feed(stream[start:end])
    assert got == responses
    assert decoder.buffered_bytes == 0


@given(st.binary(max_size=200))
def test_arbitrary_framed_bodies_give_a_response_or_protocol_error(body: bytes) -> None:
    decoder = BatchReadDecoder()
    with contextlib.suppress(ProtocolError):
        for response in decoder.feed(len(body).to_bytes(4, "big") + body):
            assert isinstance(response, BatchReadResponse)


@given(RESPONSES, st.data())
def test_mutated_frames_give_a_response_or_protocol_error(
    response: BatchReadResponse, data: st.DataObject
) -> None:
    frame = bytearray(encode_batch_read_response(response))
    position = data.draw(st.integers(4, len(frame) - 1))
    frame[position] = data.draw(st.integers(0, 255))
    with contextlib.suppress(ProtocolError):
        for decoded in BatchReadDecoder().feed(bytes(frame)):
            assert isinstance(decoded, BatchReadResponse)
