"""BookieConnection over a fake transport: matching, timeouts, the bound, failures.

No sockets: the test plays the bookie by reading the frames written to the fake transport and
feeding response frames to `data_received`; time is a fake clock the test advances.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import GlobelogError
from ledger.codecs.frames import AddFrames, RequestFrameDecoder, encode_response
from ledger.codecs.messages import (
    AddRequest,
    AddResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    ReadLacRequest,
    Request,
    Response,
)
from ledger.codes import OperationType, StatusCode
from ledger.connections.connection import BookieConnection, ConnectionConfig
from ledger.errors import (
    BookieProtocolError,
    BookieTimeoutError,
    ClientClosedError,
    ConnectionLostError,
    FrameTooLargeError,
    ProtocolError,
)

pytestmark = pytest.mark.unit

BOOKIE = "10.0.0.1:3181"
VIA = "127.0.0.1:40001"


class FakeTransport(asyncio.Transport):
    """Records writes; closing reports connection_lost on the next loop iteration."""

    def __init__(self, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.writes: list[bytes] = []  # each piece written
        self.calls = 0  # write and writelines calls
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, "write after close"
        self.calls += 1
        self.writes.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        # each piece kept apart, as the event loop's TLS transport makes each its own record
        assert not self.closed, "write after close"
        self.calls += 1
        self.writes.extend(bytes(data) for data in list_of_data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.abort()

    def abort(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)


@dataclass
class FakeClock:
    now_s: float = 1000.0
    real: bool = False  # follow the loop's clock, for the few tests of the real timer

    def __call__(self) -> float:
        return time.monotonic() if self.real else self.now_s


@dataclass
class Harness:
    """A connection, its transport, its clock, and what its close callback saw."""

    connection: BookieConnection
    transport: FakeTransport
    clock: FakeClock
    closed_with: list[GlobelogError | None] = field(default_factory=list)
    decoder: RequestFrameDecoder = field(default_factory=RequestFrameDecoder)

    def requests(self) -> list[Request]:
        """Requests written since the last call."""
        data = b"".join(self.transport.writes)
        self.transport.writes.clear()
        return self.decoder.feed(data)

    def answer(self, *responses: Response) -> None:
        self.connection.data_received(b"".join(encode_response(r) for r in responses))


@pytest.fixture
async def harness() -> Harness:
    return make_harness()  # inside the test's event loop


def make_harness(real_clock: bool = False, **config: Any) -> Harness:
    clock = FakeClock(real=real_clock)
    closed_with: list[GlobelogError | None] = []
    connection = BookieConnection(
        BOOKIE,
        VIA,
        ConnectionConfig(**config),
        on_closed=lambda _, error: closed_with.append(error),
        clock=clock,
    )
    transport = FakeTransport(connection)
    connection.connection_made(transport)
    return Harness(connection, transport, clock, closed_with)


def info_call(h: Harness, timeout_s: float | None = None) -> asyncio.Task[Response]:
    return asyncio.create_task(h.connection.call(GetBookieInfoRequest, timeout_s))


def info(txn_id: int, free: int = 0) -> GetBookieInfoResponse:
    return GetBookieInfoResponse(txn_id, StatusCode.EOK, 100, free)


async def settle() -> None:
    """Lets every ready callback run (sends are flushed once per loop iteration)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_responses_are_matched_by_txn_id_in_any_order(harness: Harness) -> None:
    calls = [info_call(harness) for _ in range(3)]
    await settle()
    requests = harness.requests()
    txn_ids = [r.txn_id for r in requests]
    assert len(set(txn_ids)) == 3
    harness.answer(*(info(t, free=t * 10) for t in reversed(txn_ids)))
    results = await asyncio.gather(*calls)
    assert [r.txn_id for r in results] == txn_ids
    assert [r.free_disk_space for r in results if isinstance(r, GetBookieInfoResponse)] == [
        t * 10 for t in txn_ids
    ]
    assert harness.connection.pending_requests == 0


async def test_pipelined_requests_of_one_loop_iteration_share_one_write(harness: Harness) -> None:
    calls = [info_call(harness) for _ in range(100)]
    await settle()
    assert harness.transport.calls == 1
    requests = harness.requests()
    assert len(requests) == 100 and harness.connection.pending_requests == 100
    harness.answer(*(info(r.txn_id) for r in requests))
    assert len(await asyncio.gather(*calls)) == 100


async def test_a_response_to_an_unknown_txn_is_dropped_and_counted(harness: Harness) -> None:
    call = info_call(harness)
    await settle()
    (request,) = harness.requests()
    harness.answer(info(request.txn_id + 1000))
    await settle()
    assert not call.done() and harness.connection.unknown_responses == 1
    harness.answer(info(request.txn_id))
    assert (await call).txn_id == request.txn_id
    assert harness.connection.is_open


async def test_a_request_times_out_with_a_retriable_error_and_its_late_answer_is_dropped(
    harness: Harness,
) -> None:
    slow = info_call(harness, timeout_s=2.0)
    await settle()
    harness.clock.now_s += 1.0
    other = info_call(harness, timeout_s=2.0)
    await settle()
    first, second = harness.requests()
    harness.answer(info(second.txn_id))  # the bookie is alive, just slow on `first`
    await other
    harness.clock.now_s += 1.5
    harness.connection.expire_overdue()
    with pytest.raises(BookieTimeoutError) as caught:
        await slow
    assert caught.value.retriable and caught.value.code == "bookie_timeout"
    assert f"bookie {BOOKIE} (via {VIA}): GET_BOOKIE_INFO txn {first.txn_id}" in str(caught.value)
    harness.answer(info(first.txn_id))  # the late answer
    assert harness.connection.unknown_responses == 1
    assert harness.connection.is_open and harness.closed_with == []


async def test_a_silent_bookie_closes_the_connection_and_fails_everything(
    harness: Harness,
) -> None:
    first = info_call(harness, timeout_s=1.0)
    await settle()
    harness.clock.now_s += 0.5
    rest = [info_call(harness, timeout_s=1.0) for _ in range(3)]
    await settle()
    harness.clock.now_s += 0.6
    harness.connection.expire_overdue()  # nothing at all came back while `first` was due
    with pytest.raises(BookieTimeoutError):
        await first
    for call in rest:
        with pytest.raises(ConnectionLostError, match=r"stalled: no response for 1\.1"):
            await call
    assert not harness.connection.is_open and harness.transport.closed
    assert len(harness.closed_with) == 1 and isinstance(harness.closed_with[0], ConnectionLostError)
    with pytest.raises(ConnectionLostError):
        await harness.connection.call(GetBookieInfoRequest)


async def test_the_timer_expires_requests_by_itself() -> None:
    h = make_harness(real_clock=True)  # a 10 ms timer, the only real wait in these tests
    with pytest.raises(BookieTimeoutError):
        await asyncio.wait_for(h.connection.call(GetBookieInfoRequest, 0.01), 1.0)


async def test_callers_beyond_the_bound_wait_for_a_slot() -> None:
    h = make_harness(inflight_max=2)
    calls = [info_call(h) for _ in range(5)]
    await settle()
    first = h.requests()
    assert len(first) == 2 and h.connection.pending_requests == 5
    h.answer(info(first[0].txn_id))
    await settle()
    (third,) = h.requests()  # one slot freed, one more request sent
    h.answer(info(first[1].txn_id), info(third.txn_id))
    await settle()
    last = h.requests()
    assert len(last) == 2
    h.answer(*(info(r.txn_id) for r in last))
    assert len(await asyncio.gather(*calls)) == 5 and h.connection.pending_requests == 0


async def test_waiting_for_a_slot_counts_against_the_request_timeout() -> None:
    h = make_harness(real_clock=True, inflight_max=1)
    busy = info_call(h, timeout_s=30.0)
    await settle()
    with pytest.raises(BookieTimeoutError, match=r"no in-flight slot within 0\.01 s"):
        await asyncio.wait_for(h.connection.call(GetBookieInfoRequest, 0.01), 1.0)
    (request,) = h.requests()
    h.answer(info(request.txn_id))
    await busy
    assert h.connection.pending_requests == 0


async def test_a_paused_socket_holds_senders_back(harness: Harness) -> None:
    harness.connection.pause_writing()
    call = info_call(harness)
    await settle()
    assert harness.requests() == [] and harness.connection.pending_requests == 1
    harness.connection.resume_writing()
    await settle()
    (request,) = harness.requests()
    harness.answer(info(request.txn_id))
    await call


GARBAGE = [
    pytest.param(b"\x00\x00\x00\x05hello", id="not-protobuf"),
    pytest.param(b"\x7f\xff\xff\xff", id="oversize-length"),
    pytest.param(b"\x00\x00\x00\x02\x0a\x00", id="missing-required-fields"),
]


@pytest.mark.parametrize("garbage", GARBAGE)
async def test_bad_bytes_fail_every_request_in_flight_and_close(
    harness: Harness, garbage: bytes
) -> None:
    calls = [info_call(harness) for _ in range(3)]
    await settle()
    harness.connection.data_received(garbage)
    for call in calls:
        with pytest.raises(BookieProtocolError) as caught:
            await call
        assert isinstance(caught.value, ProtocolError) and caught.value.retriable
        assert f"bookie {BOOKIE} (via {VIA})" in str(caught.value)
    assert harness.transport.closed and not harness.connection.is_open
    assert isinstance(harness.closed_with[0], BookieProtocolError)
    await harness.connection.wait_closed()
    with pytest.raises(BookieProtocolError):  # later callers fail at once, never hang
        await harness.connection.call(GetBookieInfoRequest)


async def test_eof_fails_every_request_in_flight(harness: Harness) -> None:
    calls = [info_call(harness) for _ in range(3)]
    await settle()
    harness.connection.eof_received()
    harness.connection.connection_lost(None)
    for call in calls:
        with pytest.raises(ConnectionLostError, match=f"bookie {BOOKIE}.*closed by the bookie"):
            await call


async def test_eof_inside_a_frame_is_a_truncated_frame(harness: Harness) -> None:
    call = info_call(harness)
    await settle()
    (request,) = harness.requests()
    frame = encode_response(info(request.txn_id))
    harness.connection.data_received(frame[:-3])
    harness.connection.connection_lost(ConnectionResetError(104, "reset"))
    with pytest.raises(BookieProtocolError, match=f"{len(frame) - 3} bytes into a frame"):
        await call


async def test_an_answer_of_another_operation_is_a_protocol_error(harness: Harness) -> None:
    call = info_call(harness)
    await settle()
    (request,) = harness.requests()
    harness.answer(AddResponse(request.txn_id, StatusCode.EOK, 1, 2))
    with pytest.raises(BookieProtocolError, match="was GET_BOOKIE_INFO but was answered as"):
        await call
    assert harness.transport.closed


async def test_close_fails_requests_with_a_non_retriable_error(harness: Harness) -> None:
    call = info_call(harness)
    await settle()
    harness.connection.close()
    with pytest.raises(ClientClosedError) as caught:
        await call
    assert not caught.value.retriable
    assert harness.closed_with == [None]  # closing is not a failure of the bookie
    await harness.connection.wait_closed()


async def test_a_cancelled_caller_keeps_its_slot_until_the_bookie_answers() -> None:
    h = make_harness(inflight_max=1)
    call = info_call(h)
    await settle()
    call.cancel()
    await settle()
    assert h.connection.pending_requests == 1  # the bookie is still working on it
    (request,) = h.requests()
    h.answer(info(request.txn_id))
    assert h.connection.pending_requests == 0 and h.connection.unknown_responses == 0
    nxt = asyncio.create_task(h.connection.call(lambda t: ReadLacRequest(t, 5)))
    await settle()
    assert len(h.requests()) == 1
    nxt.cancel()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks=st.lists(st.binary(max_size=64), min_size=1, max_size=6))
def test_arbitrary_bytes_never_crash_or_hang_a_request(chunks: list[bytes]) -> None:
    async def scenario() -> None:
        h = make_harness()
        call = info_call(h)
        await settle()
        for chunk in chunks:
            h.connection.data_received(chunk)
        h.connection.connection_lost(None)  # then the bookie hangs up
        (outcome,) = await asyncio.wait_for(asyncio.gather(call, return_exceptions=True), 1.0)
        # Random bytes are a protocol error or a lost connection; on the slim chance they
        # spell a valid answer to txn 1, that is an answer. Never a crash or a hang.
        assert isinstance(outcome, GetBookieInfoResponse | GlobelogError), outcome
        assert not isinstance(outcome, GlobelogError) or outcome.retriable
        assert not h.connection.is_open

    asyncio.run(scenario())


async def test_try_send_sends_at_once_while_a_slot_is_free_and_steps_aside_otherwise() -> None:
    h = make_harness(inflight_max=2)
    first = h.connection.try_send(GetBookieInfoRequest)
    second = h.connection.try_send(GetBookieInfoRequest)
    assert first is not None and second is not None
    assert h.connection.try_send(GetBookieInfoRequest) is None  # the window is full
    await settle()
    sent = h.requests()
    assert len(sent) == 2
    h.answer(info(sent[1].txn_id, free=7), info(sent[0].txn_id, free=3))
    await settle()
    assert isinstance(first.result(), GetBookieInfoResponse) and first.result().free_disk_space == 3
    assert second.result().free_disk_space == 7  # type: ignore[union-attr]
    assert h.connection.try_send(GetBookieInfoRequest) is not None  # slots came back


async def test_try_send_refuses_a_failed_connection_and_fails_like_call_on_eof() -> None:
    h = make_harness()
    pending = h.connection.try_send(GetBookieInfoRequest)
    assert pending is not None
    await settle()
    h.connection.eof_received()
    h.connection.connection_lost(None)
    with pytest.raises(ConnectionLostError, match="closed by the bookie"):
        await pending
    assert h.connection.try_send(GetBookieInfoRequest) is None


Answers = list[tuple[Response | None, GlobelogError | None]]


async def test_an_answer_callback_gets_its_response_as_it_is_decoded() -> None:
    h = make_harness(inflight_max=2)
    answers: Answers = []
    assert h.connection.try_send_calling(GetBookieInfoRequest, lambda *a: answers.append(a))
    assert h.connection.try_send_calling(GetBookieInfoRequest, lambda *a: answers.append(a))
    assert not h.connection.try_send_calling(GetBookieInfoRequest, lambda *a: answers.append(a))
    assert answers == []  # never during the call
    await settle()
    sent = h.requests()
    h.answer(info(sent[1].txn_id, free=7), info(sent[0].txn_id, free=3))
    # no loop iteration needed: the callbacks ran inside data_received, in response order
    assert [(r.free_disk_space, e) for r, e in answers] == [(7, None), (3, None)]  # type: ignore[union-attr]
    assert h.connection.pending_requests == 0


async def test_an_answer_callback_hears_a_failure_after_the_connection_has_failed() -> None:
    h = make_harness()
    answers: Answers = []
    states: list[bool] = []

    def answer(response: Response | None, error: GlobelogError | None) -> None:
        answers.append((response, error))
        states.append(h.connection.is_open)  # a retry from here must not use this connection

    assert h.connection.try_send_calling(GetBookieInfoRequest, answer)
    await settle()
    h.connection.data_received(b"\x00\x00\x00\x01\xff")  # not a protobuf Response
    assert answers == []  # not inside the failure: on the next loop iteration
    assert h.closed_with and isinstance(h.closed_with[0], BookieProtocolError)
    await settle()
    [(response, error)] = answers
    assert response is None and isinstance(error, BookieProtocolError)
    assert states == [False]
    assert not h.connection.try_send_calling(GetBookieInfoRequest, answer)


async def test_a_failing_answer_callback_is_reported_and_the_others_are_answered() -> None:
    h = make_harness()
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    answers: Answers = []

    def broken(response: Response | None, error: GlobelogError | None) -> None:
        raise RuntimeError("a bug in the caller")

    assert h.connection.try_send_calling(GetBookieInfoRequest, broken)
    assert h.connection.try_send_calling(GetBookieInfoRequest, lambda *a: answers.append(a))
    await settle()
    sent = h.requests()
    h.answer(*(info(r.txn_id) for r in sent))
    assert len(answers) == 1 and answers[0][1] is None
    assert [type(c["exception"]) for c in reported] == [RuntimeError]
    assert h.connection.is_open


async def test_over_tls_a_loop_iterations_frames_go_out_in_one_write() -> None:
    """Over TLS each write is a record both ends seal and open: a pre-encoded frame's three
    pieces, and the other frames of the same loop iteration, are joined; in clear they go
    out as they are (one writev)."""
    frames = AddFrames(AddRequest(0, 5, 9, b"k" * 20, b"entry packet", False))
    for tls, pieces in ((ssl.create_default_context(), 1), (None, 6)):
        h = make_harness(inflight_max=2, tls=tls)
        assert h.connection.try_send_frame(OperationType.ADD_ENTRY, frames.pieces, no_answer)
        assert h.connection.try_send_frame(OperationType.ADD_ENTRY, frames.pieces, no_answer)
        await settle()
        assert (h.transport.calls, len(h.transport.writes)) == (1, pieces), tls
        assert len(h.requests()) == 2


def no_answer(*_: object) -> None:
    pass


async def test_a_pre_encoded_frame_goes_out_and_is_matched_by_its_txn_id() -> None:
    h = make_harness(inflight_max=1, frame_bytes_max=200)
    frames = AddFrames(AddRequest(0, 5, 9, b"k" * 20, b"entry packet", False))
    answers: Answers = []
    answer = lambda *a: answers.append(a)  # noqa: E731
    assert h.connection.try_send_frame(OperationType.ADD_ENTRY, frames.pieces, answer)
    await settle()
    [request] = h.requests()
    assert isinstance(request, AddRequest) and request.body == b"entry packet"
    h.connection.data_received(encode_response(AddResponse(request.txn_id, StatusCode.EOK, 5, 9)))
    [(response, error)] = answers
    assert isinstance(response, AddResponse) and error is None
    big = AddFrames(AddRequest(0, 5, 10, b"k" * 20, b"x" * 300, False))
    with pytest.raises(FrameTooLargeError):
        h.connection.try_send_frame(OperationType.ADD_ENTRY, big.pieces, lambda *a: None)
    # the refused frame gave its slot back: the one slot takes the next request
    assert h.connection.try_send_frame(OperationType.ADD_ENTRY, frames.pieces, lambda *a: None)
