"""One asyncio connection to one bookie: pipelined v3 requests matched to responses by txn id.

The driver around the pure `InflightWindow`: it frames requests, batching the frames of one
event-loop iteration into one send; decodes responses with `FrameDecoder`; and resolves one
future per request. Every request has a deadline, which also bounds its wait for one of the
`inflight_max` slots. Bad bytes, EOF, a reset or a stall close the connection for good and fail
every request in flight with a retriable error naming the bookie and the address dialled.
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from core import runtime
from core.errors import ConfigError, GlobelogError
from ledger.codecs.batch_codec import (
    BatchReadDecoder,
    BatchReadRequest,
    BatchReadResponse,
    encode_batch_read,
)
from ledger.codecs.frames import FRAME_BYTES_MAX, FrameDecoder, encode_request
from ledger.codecs.messages import Request, Response
from ledger.codes import OperationType
from ledger.connections.inflight import InflightWindow, Outstanding
from ledger.connections.slots import Slots
from ledger.connections.start_tls import open_tls
from ledger.errors import (
    BookieProtocolError,
    BookieTimeoutError,
    BookieUnavailableError,
    ClientClosedError,
    ConnectionLostError,
    FrameTooLargeError,
    ProtocolError,
)

REQUEST_TIMEOUT_S = 5.0  # BookKeeper's readTimeout, which addEntryTimeoutSec defaults to
CONNECT_TIMEOUT_S = 5.0
# Requests in flight per connection: enough to keep a bookie's journal group commit busy;
# memory stays bounded because the socket's write buffer also pauses senders.
INFLIGHT_MAX = 1024

logger = logging.getLogger(__name__)

WireRequest = Request | BatchReadRequest
WireResponse = Response | BatchReadResponse
RequestFactory = Callable[[int], WireRequest]  # txn id -> the request to send
Clock = Callable[[], float]


class ResponseDecoder(Protocol):
    """Bytes in, whole responses out (`ledger.codecs.frames.Deframer`)."""

    @property
    def buffered_bytes(self) -> int: ...

    def feed(self, data: bytes) -> Sequence[WireResponse]: ...


@dataclass(frozen=True, slots=True)
class Wire:
    """The protocol of a connection: how its requests are framed and its responses parsed.

    A bookie fixes a connection's protocol at its first frame, so each connection speaks one.
    """

    name: str
    encode: Callable[[WireRequest, int], bytes]  # (request, frame bound) -> frame
    decoder: Callable[[int], ResponseDecoder]  # frame bound -> a fresh decoder


def _encode_v3(request: WireRequest, frame_bytes_max: int) -> bytes:
    assert not isinstance(request, BatchReadRequest), "batched reads go on a v2 connection"
    return encode_request(request, frame_bytes_max)


def _encode_v2_batch(request: WireRequest, frame_bytes_max: int) -> bytes:
    assert isinstance(request, BatchReadRequest), (
        f"a v2 connection sends batched reads only: {request}"
    )
    return encode_batch_read(request, frame_bytes_max)


# Every request but batched reads (protobuf), and batched reads (BookKeeper's v2 protocol).
V3_WIRE = Wire("v3", _encode_v3, FrameDecoder)
BATCH_READ_WIRE = Wire("v2 batch read", _encode_v2_batch, BatchReadDecoder)


@dataclass(frozen=True, slots=True)
class ConnectionConfig:
    request_timeout_s: float = REQUEST_TIMEOUT_S
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    inflight_max: int = INFLIGHT_MAX
    frame_bytes_max: int = FRAME_BYTES_MAX
    # TLS to every bookie (START_TLS, ledger/connections/start_tls.py): verifies the bookie's
    # certificate and presents the client's; None speaks in clear
    tls: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        assert self.request_timeout_s > 0, self.request_timeout_s
        assert self.connect_timeout_s > 0, self.connect_timeout_s
        assert self.inflight_max > 0, self.inflight_max


# How a request's answer reaches its sender: a future, or (the add hot path) a callback given
# the response or the error, called as the answer is decoded: no future, no loop iteration.
AnswerCallback = Callable[[WireResponse | None, GlobelogError | None], None]
Ticket = asyncio.Future[WireResponse] | AnswerCallback

# Called once when a connection closes: with the error for a failure, None for close().
ClosedCallback = Callable[["BookieConnection", GlobelogError | None], None]


def split_address(address: str) -> tuple[str, int]:
    """("host", port) of a "host:port" address; ConfigError if it is not one."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"bookie address {address!r}: expected host:port")
    return host, int(port)


def describe(bookie_id: str, address: str) -> str:
    """How errors name a bookie: its id, and the address dialled if that differs (WAN route)."""
    return f"bookie {bookie_id}" + ("" if address == bookie_id else f" (via {address})")


class BookieConnection(asyncio.Protocol):
    """One TCP connection to one bookie; used once: after a failure, open a new one."""

    def __init__(
        self,
        bookie_id: str,
        address: str,
        config: ConnectionConfig | None = None,
        on_closed: ClosedCallback | None = None,
        clock: Clock | None = None,
        wire: Wire = V3_WIRE,
    ) -> None:
        self.bookie_id = bookie_id
        self.address = address
        self.config = config if config is not None else ConnectionConfig()
        self.name = describe(bookie_id, address)
        self._on_closed = on_closed
        self._clock = clock if clock is not None else runtime.clock()
        self._loop = asyncio.get_running_loop()
        self._window: InflightWindow[Ticket] = InflightWindow(self.config.inflight_max)
        self._wire = wire
        self._decoder = wire.decoder(self.config.frame_bytes_max)
        self._slots = Slots(self.config.inflight_max)
        self._waiting = 0  # callers waiting for a slot or for the socket to drain
        self._writable = asyncio.Event()
        self._writable.set()
        self._transport: asyncio.Transport | None = None
        self._tx: list[bytes] = []  # frames of this loop iteration; each one is in the window
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline_s = math.inf
        self._last_response_s = -math.inf  # when a whole response last arrived
        self._failure: GlobelogError | None = None
        self._closed: asyncio.Future[None] = self._loop.create_future()

    @classmethod
    async def open(
        cls,
        bookie_id: str,
        address: str,
        config: ConnectionConfig | None = None,
        on_closed: ClosedCallback | None = None,
        wire: Wire = V3_WIRE,
    ) -> BookieConnection:
        """Connects to `address` (over TLS when the config has a context, the bookie's
        certificate verified for its id's host); BookieUnavailableError if that fails within
        the timeout."""
        config = config if config is not None else ConnectionConfig()
        host, port = split_address(address)
        loop = asyncio.get_running_loop()
        where = describe(bookie_id, address)

        def make() -> BookieConnection:
            return cls(bookie_id, address, config, on_closed, wire=wire)

        try:
            async with asyncio.timeout(config.connect_timeout_s):
                if config.tls is None:
                    _, connection = await loop.create_connection(make, host, port)
                else:
                    name, _ = split_address(bookie_id)
                    connection = await open_tls(host, port, config.tls, name, make, where)
        except TimeoutError as err:
            raise BookieUnavailableError(
                f"{where}: no connection within {config.connect_timeout_s} s"
            ) from err
        except OSError as err:
            raise BookieUnavailableError(f"{where}: cannot connect: {err}") from err
        return connection

    # ---------------------------------------------------------------------- caller side

    @property
    def is_open(self) -> bool:
        return self._failure is None and self._transport is not None

    @property
    def pending_requests(self) -> int:
        """Requests in flight plus callers waiting to send (the bookie's load from here)."""
        return len(self._window) + self._waiting

    @property
    def unknown_responses(self) -> int:
        """Responses dropped because no request with their txn id was in flight."""
        return self._window.unknown_responses

    async def call(self, make: RequestFactory, timeout_s: float | None = None) -> WireResponse:
        """Sends `make(txn_id)` and returns the bookie's response, whatever its status.

        `timeout_s` (default: the config's) covers the wait for a slot and the round trip.
        Raises BookieTimeoutError, ConnectionLostError, BookieProtocolError or ClientClosedError.
        """
        timeout_s = self.config.request_timeout_s if timeout_s is None else timeout_s
        assert timeout_s > 0, timeout_s
        deadline_s = self._clock() + timeout_s
        await self._admit(deadline_s, timeout_s)
        future: asyncio.Future[WireResponse] = self._loop.create_future()
        self._start(make, deadline_s, future)
        return await future

    def try_send(self, make: RequestFactory) -> asyncio.Future[WireResponse] | None:
        """Sends at once if a slot is free and the connection healthy; else None (use `call`).

        The hot path for pipelined adds: no task and no coroutine per request. The future
        fails as `call` would (timeout, connection lost, protocol error, closed).
        """
        if not self._may_send_now():
            return None
        future: asyncio.Future[WireResponse] = self._loop.create_future()
        self._start(make, self._clock() + self.config.request_timeout_s, future)
        return future

    def try_send_calling(self, make: RequestFactory, answer: AnswerCallback) -> bool:
        """`try_send` with a callback instead of a future: `answer(response, None)` as the
        response is decoded, or `answer(None, error)` on the next loop iteration after a
        failure; exactly once, never during this call. False: nothing sent."""
        if not self._may_send_now():
            return False
        self._start(make, self._clock() + self.config.request_timeout_s, answer)
        return True

    def try_send_frame(
        self,
        operation: OperationType,
        frame_of: Callable[[int], Sequence[bytes]],
        answer: AnswerCallback,
    ) -> bool:
        """`try_send_calling` for a request already encoded: `frame_of(txn_id)` gives its v3
        frame in pieces (encoded once for every bookie of the write quorum; joined with the
        loop iteration's other frames only over TLS, see `_flush`). False: nothing sent."""
        assert self._wire is V3_WIRE, "pre-encoded frames are v3 requests"
        if not self._may_send_now():
            return False
        try:
            txn_id = self._window.reserve_txn_id()
            pieces = frame_of(txn_id)
            size = sum(len(piece) for piece in pieces)
            if size > self.config.frame_bytes_max:
                raise FrameTooLargeError(
                    f"frame is {size} bytes; the limit is {self.config.frame_bytes_max}"
                )
        except BaseException:
            self._slots.give()
            raise
        self._open(txn_id, operation, self._clock() + self.config.request_timeout_s, answer, pieces)
        return True

    def _may_send_now(self) -> bool:
        """Whether the connection is healthy, its socket writable, and a slot taken now."""
        if self._failure is not None or self._transport is None or not self._writable.is_set():
            return False
        return self._slots.try_take()

    def _start(self, make: RequestFactory, deadline_s: float, ticket: Ticket) -> None:
        """Encodes and sends a request for which a slot is already taken."""
        try:
            txn_id = self._window.reserve_txn_id()
            request = make(txn_id)
            data = self._wire.encode(request, self.config.frame_bytes_max)
        except BaseException:
            self._slots.give()
            raise
        self._open(txn_id, request.operation, deadline_s, ticket, (data,))

    def _open(
        self,
        txn_id: int,
        operation: OperationType,
        deadline_s: float,
        ticket: Ticket,
        pieces: Sequence[bytes],
    ) -> None:
        """Puts an encoded request in flight: in the window, in this iteration's write."""
        self._window.open(txn_id, operation, self._clock(), deadline_s, ticket)
        # One write per loop iteration: pipelined callers share a send system call.
        if not self._tx:
            self._loop.call_soon(self._flush)
        self._tx += pieces
        self._arm_timer(deadline_s)

    async def _admit(self, deadline_s: float, timeout_s: float) -> None:
        """Takes an in-flight slot, waiting (until the deadline) while the window is full or
        the socket's write buffer is over its high-water mark."""
        self._raise_if_failed()
        if self._writable.is_set() and self._slots.try_take():
            return
        acquired = False
        self._waiting += 1
        try:
            async with asyncio.timeout(max(0.0, deadline_s - self._clock())):
                await self._slots.take()
                acquired = True
                await self._writable.wait()
        except TimeoutError as err:
            if acquired:
                self._slots.give()
            raise BookieTimeoutError(
                f"{self.name}: no in-flight slot within {timeout_s} s "
                f"({len(self._window)} requests in flight, limit {self._window.inflight_max})"
            ) from err
        except BaseException:
            if acquired:
                self._slots.give()
            raise
        finally:
            self._waiting -= 1
        if self._failure is not None:
            self._slots.give()
            self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise _copy(self._failure)
        if self._transport is None:
            raise ConnectionLostError(f"{self.name}: not connected")

    def close(self) -> None:
        """Closes the connection; requests in flight fail with ClientClosedError."""
        self._fail(ClientClosedError(f"{self.name}: connection closed by this client"))

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    # ----------------------------------------------------------------------- sending

    def _flush(self) -> None:
        chunks, self._tx = self._tx, []
        if chunks and self._transport is not None and self._failure is None:
            if self.config.tls is not None:
                # One write of the frames joined: over TLS the event loop's transport makes
                # each piece written its own TLS record (three per add: prefix, header, entry),
                # each sealed by this client and opened by the bookie; joined, OpenSSL fills
                # 16 KiB records.
                self._transport.write(b"".join(chunks))
            else:
                self._transport.writelines(chunks)  # one writev, no joined copy

    # ----------------------------------------------------------------------- deadlines

    def _arm_timer(self, deadline_s: float) -> None:
        # One timer at the earliest deadline; with one timeout, deadlines only grow, so a new
        # request rarely moves it.
        if deadline_s >= self._timer_deadline_s:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_deadline_s = deadline_s
        delay_s = max(0.0, deadline_s - self._clock())
        self._timer = self._loop.call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_deadline_s = math.inf
        self.expire_overdue()

    def expire_overdue(self) -> None:
        """Fails every request past its deadline (the timer calls this).

        If no response at all arrived while an expired request was in flight, the connection
        is stalled (paused process, black-holed link, a frame that never completes): it is
        closed, so the requests behind fail now and the next attempt dials afresh.
        """
        now_s = self._clock()
        stalled: Outstanding[Ticket] | None = None
        for request in self._window.expire(now_s):
            self._slots.give()
            waited_s = now_s - request.sent_s
            _reject(
                self._loop,
                request,
                BookieTimeoutError(
                    f"{self.name}: {request.operation.name} txn {request.txn_id} got no answer "
                    f"in {waited_s:.3f} s"
                ),
            )
            if stalled is None and self._last_response_s < request.sent_s:
                stalled = request
        if stalled is not None:
            silent_s = now_s - stalled.sent_s
            self._fail(
                ConnectionLostError(f"{self.name}: stalled: no response for {silent_s:.3f} s")
            )
            return
        next_deadline_s = self._window.next_deadline_s()
        if next_deadline_s is not None:
            self._arm_timer(next_deadline_s)

    # ----------------------------------------------------------------------- protocol side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport; uvloop's is one without subclassing asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._failure is not None:
            return  # bytes still in the socket after the connection failed: nobody waits
        try:
            responses = self._decoder.feed(data)
        except ProtocolError as err:
            self._fail(BookieProtocolError(f"{self.name}: {err}; connection closed"))
            return
        if responses:
            self._last_response_s = self._clock()
        for response in responses:
            if self._failure is not None:
                return
            self._settle(response)

    def _settle(self, response: WireResponse) -> None:
        request = self._window.settle(response.txn_id)
        if request is None:
            # Most often the late answer to a request that timed out.
            logger.debug(
                "dropped response to unknown txn",
                extra={"bookie": self.bookie_id, "txn_id": response.txn_id},
            )
            return
        self._slots.give()
        if request.operation is not response.operation:
            self._fail(
                BookieProtocolError(
                    f"{self.name}: txn {request.txn_id} was {request.operation.name} but was "
                    f"answered as {response.operation.name}; connection closed"
                ),
                also=request,
            )
            return
        ticket = request.ticket
        if isinstance(ticket, asyncio.Future):
            if not ticket.done():
                ticket.set_result(response)
        else:
            _call_back(self._loop, ticket, response, None)

    def eof_received(self) -> bool | None:
        return None  # close our side too: connection_lost fails what is in flight

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        reason = "closed by the bookie" if exc is None else f"lost: {exc}"
        partial = self._decoder.buffered_bytes
        if partial:  # the stream ended inside a frame: a truncated frame
            self._fail(
                BookieProtocolError(
                    f"{self.name}: connection {reason} {partial} bytes into a frame"
                )
            )
        else:
            self._fail(ConnectionLostError(f"{self.name}: connection {reason}"))
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def _fail(self, error: GlobelogError, also: Outstanding[Ticket] | None = None) -> None:
        """Closes the connection for good; fails `also` and every request in flight."""
        if self._failure is not None:
            return
        self._failure = error
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        failed = self._window.drain()
        for _ in failed:
            self._slots.give()
        for request in [*failed, *([also] if also is not None else [])]:
            _reject(self._loop, request, _copy(error))
        self._writable.set()  # wake callers waiting for the socket; they see the failure
        self._tx.clear()
        if self._transport is not None:
            self._transport.abort()  # nothing left worth flushing to a failed bookie
        elif not self._closed.done():
            self._closed.set_result(None)
        closed_here = isinstance(error, ClientClosedError)
        if not closed_here:
            logger.warning(
                "bookie connection failed: %s",
                error,
                extra={"bookie": self.bookie_id, "address": self.address, "failed": len(failed)},
            )
        if self._on_closed is not None:
            self._on_closed(self, None if closed_here else error)


def _reject(
    loop: asyncio.AbstractEventLoop, request: Outstanding[Ticket], error: GlobelogError
) -> None:
    ticket = request.ticket
    if isinstance(ticket, asyncio.Future):
        if not ticket.done():  # a caller that was cancelled no longer waits
            ticket.set_exception(error)
    else:
        # Later, as a future's callbacks would run: after the connection has failed for good
        # and its pool has heard, so that a retry meets the backoff, not this connection.
        loop.call_soon(_call_back, loop, ticket, None, error)


def _call_back(
    loop: asyncio.AbstractEventLoop,
    answer: AnswerCallback,
    response: WireResponse | None,
    error: GlobelogError | None,
) -> None:
    # As a future's done callback would: a callback's bug is reported, and the connection
    # and the other requests' answers go on.
    try:
        answer(response, error)
    except Exception as bug:  # noqa: BLE001 - reported as the loop reports a callback's
        loop.call_exception_handler(
            {"message": "a bookie request's answer callback failed", "exception": bug}
        )


def _copy(error: GlobelogError) -> GlobelogError:
    """A fresh instance per request, so each caller's traceback is its own."""
    return type(error)(*error.args)
