"""How a proxy listens: at most `connections_max` connections, each with deadlines.

A slow or silent client holds a connection, and with it memory and a file descriptor, for as
long as the server waits for it. A proxy waits at most `idle_timeout_s` for a request's
headers (from the connection's start, or from the previous answer on a kept-alive
connection) and `body_timeout_s` for its body, and a client at most `send_timeout_s` to take
each slice of an answer (`sent_within`); past `connections_max` open connections a new
one is answered 429 over_capacity and closed at once, so the connections already open (the
well-behaved clients among them) go on being served.

The idle deadline is longer than a client's own keep-alive (aiohttp's client closes an idle
pooled connection after 15 s), so a proxy does not close a pooled connection just as the
client sends a write on it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import random
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import cast

from aiohttp import web

from core import runtime
from core.errors import GlobelogError, RecordTooLargeError, RequestTimeoutError
from core.records import RECORD_BYTES_MAX
from core.settings.limits import ProxyLimits
from region.admission.accepts import ConnectionRate
from region.admission.barring import KernelBar
from region.admission.quotas import refusal_hold_s
from region.http_errors import error_body
from region.observability.telemetry import PROXY_METRICS, route_of

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 10.0
BACKLOG = 1024  # connections the kernel holds until they are accepted
ACCEPT_PAUSE_S = 0.1  # after an accept failed (no descriptor left), the next waits this long
ACCEPTS_BEFORE_YIELD = 64  # connections accepted in a row before the loop runs other work
HELD_MAX = 1024  # refused connections held at once until their reset; past it, reset at once
HANDSHAKES_PER_TURN = 4  # TLS handshakes begun per turn of the loop (each ~1 ms of its core)
WAITING_MAX = 4096  # accepted connections waiting for their handshake; past it, reset at once
RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: a close sends a reset
STOP_GRACE_S = 5.0  # at a stop, how long requests being handled get to finish
# An answer of megabytes written to its connection in one go was encrypted (TLS) in one go
# too: 60-100 ms in which the loop ran nothing else (a read proxy under pages of 4 MiB,
# py-spy). Past SEND_SLICE_BYTES an answer is written a slice per turn of the loop.
SEND_SLICE_BYTES = 256 * 1024
JSON = "application/json"


class _Refused(asyncio.Protocol):
    """A connection past the cap: answered over_capacity, then closed."""

    def __init__(self, open_now: int) -> None:
        self.open_now = open_now

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check
        stream = cast(asyncio.WriteTransport, transport)
        body = error_body(
            "over_capacity",
            f"this proxy has {self.open_now} connections open, its most; retry later",
        )
        head = (
            "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
        )
        stream.write(head.encode() + body)
        stream.close()

    def data_received(self, data: bytes) -> None:
        pass  # the request is not read


class _Gate(asyncio.Protocol):
    """A connection in clear: held, then reset, when its address opens connections too fast,
    else served by the application's protocol, which it passes everything on to."""

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._inner: asyncio.Protocol | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if not self._listener.admit(address):
            stream = cast(asyncio.Transport, transport)
            stream.pause_reading()
            self._listener.refuse(stream.abort)
            return
        accepted = transport.get_extra_info("socket")
        if accepted is not None:
            self._listener.bar.release(accepted)
        self._inner = self._listener.protocol()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self._inner is None else self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()


class Listener:
    """An aiohttp application served on host:port within `limits`.

    A connection whose address opens them faster than its rate (region/admission/accepts.py)
    is held unread for about a second (`refusal_hold_s`), then reset. With TLS the listener
    accepts connections itself, so that such a connection costs no handshake, and hands the
    others to the loop, which makes the handshake; in clear (the simulation's way too) the
    loop's own server accepts them and a gate protocol checks each first."""

    def __init__(self, app: web.Application, limits: ProxyLimits) -> None:
        self.limits = limits
        # keepalive_timeout closes a connection whose next request's headers have not all
        # come this long after it opened or after the previous answer (aiohttp arms it at
        # both, and data arriving does not put it off): the header deadline.
        # at a stop, handlers still running (a client stalled mid-body) get STOP_GRACE_S, then
        # are cancelled: a stop never waits out a slow client's body deadline
        self._runner = web.AppRunner(
            app,
            access_log=None,
            keepalive_timeout=limits.idle_timeout_s,
            shutdown_timeout=STOP_GRACE_S,
        )
        self.tls: ssl.SSLContext | None = None
        self.rate = ConnectionRate(
            limits.connections_per_s_per_address, limits.connection_burst_per_address
        )
        self.bar = KernelBar()  # addresses past their rate, barred on the listening sockets
        self._server: asyncio.Server | None = None  # in clear: the loop's own
        self._port = 0
        self._sockets: list[socket.socket] = []  # with TLS: accepted from here
        self._acceptors: list[asyncio.Task[None]] = []
        self._handing: set[asyncio.Task[None]] = set()  # connections being handed on
        self._unhanded: set[socket.socket] = set()  # accepted, not yet given to the loop
        # accepted connections waiting for their handshake, by address, in turn (TLS only)
        self._waiting: dict[str, collections.deque[socket.socket]] = {}
        self._waiting_count = 0
        self._pacer: asyncio.Task[None] | None = None
        # refused connections held until their reset: each one's reset and its timer
        self._held: dict[Callable[[], None], asyncio.TimerHandle] = {}
        self._rng: random.Random | None = None  # made on the loop (the simulation's seed)
        self._stopping = False
        self.refused = 0  # connections refused at the cap, since the start

    @property
    def open_connections(self) -> int:
        server = self._runner.server
        return 0 if server is None else len(server.connections)

    @property
    def port(self) -> int:
        """The port it listens on (the one the kernel chose, for 0)."""
        if self._server is not None:
            if not self._server.sockets:  # a simulated server has no sockets
                return self._port
            return int(self._server.sockets[0].getsockname()[1])
        assert self._sockets, "not started"
        return int(self._sockets[0].getsockname()[1])

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        """Listens on host:port (every address the host name has), with TLS when `tls` is
        given (its handshake bounded by the header deadline, as a request's headers are)."""
        await self._runner.setup()
        self.tls = tls
        self._port = port
        loop = asyncio.get_running_loop()
        if tls is None:
            self._server = await loop.create_server(
                lambda: _Gate(self), host, port, reuse_address=True, backlog=BACKLOG
            )
            # the loop's own sockets (a simulated server has none): they take programs alike
            self.bar.listen_on(cast(list[socket.socket], list(self._server.sockets)))
            return
        found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, found_address in dict.fromkeys(found):
            address = found_address
            if self._sockets and port == 0:  # the same port on every address
                address = (found_address[0], self.port, *found_address[2:])
            listening = socket.socket(family, kind, proto)
            try:
                listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    listening.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                listening.bind(address)
                listening.listen(BACKLOG)
                listening.setblocking(False)
            except OSError:
                listening.close()
                await self.stop()
                raise
            self._sockets.append(listening)
        self.bar.listen_on(self._sockets)
        self._acceptors = [loop.create_task(self._accept(s)) for s in self._sockets]

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        accepted = 0
        while True:
            try:
                connection, peer = await loop.sock_accept(listening)
            except OSError as err:  # out of descriptors, say: the backlog waits meanwhile
                log.warning("accepting a connection failed: %s", err)
                await asyncio.sleep(ACCEPT_PAUSE_S)
                continue
            accepted += 1
            if accepted % ACCEPTS_BEFORE_YIELD == 0:
                # a queue of connections is not accepted in one go (an asyncio loop's
                # sock_accept does not yield while the kernel has one): the rest run between
                await asyncio.sleep(0)
            try:
                self._accepted(connection, str(peer[0]))
            except Exception:  # a bug here must not end the accepting
                log.exception("a connection from %s could not be handed on", peer)
                connection.close()

    def admit(self, address: str) -> bool:
        """Whether a new connection from `address` is served (counted when it is not). One that
        is not also bars the address in the kernel for the hold (region/admission/barring.py),
        so that its next connections are not even accepted meanwhile."""
        if self.rate.admit(address):
            return True
        PROXY_METRICS.connections_refused.add(1, {"reason": "address_rate"})
        if self.bar.bar(address, refusal_hold_s(self._random())):
            PROXY_METRICS.addresses_barred.add(1)
        return False

    def _random(self) -> random.Random:
        if self._rng is None:  # made on the loop: the simulation's seed
            self._rng = runtime.new_rng()
        return self._rng

    def refuse(self, reset: Callable[[], None]) -> None:
        """Resets a refused connection about a second after it came (`refusal_hold_s`; nothing
        of it read meanwhile), or at once when HELD_MAX are held already: a client that
        reconnects the moment it is refused is held as a quota's refusal holds it, instead of
        making the proxy accept and reset as fast as it can reconnect."""
        if len(self._held) >= HELD_MAX:
            reset()
            return
        self._held[reset] = asyncio.get_running_loop().call_later(
            refusal_hold_s(self._random()), self._end_hold, reset
        )

    def _end_hold(self, reset: Callable[[], None]) -> None:
        del self._held[reset]
        reset()

    def _accepted(self, connection: socket.socket, address: str) -> None:
        if self._stopping:
            connection.close()
            return
        if not self.admit(address):
            self.refuse(functools.partial(_reset, connection))
            return
        self.bar.release(connection)
        if self._waiting_count >= WAITING_MAX:
            PROXY_METRICS.connections_refused.add(1, {"reason": "handshakes_waiting"})
            _reset(connection)
            return
        self._unhanded.add(connection)
        self._waiting.setdefault(address, collections.deque()).append(connection)
        self._waiting_count += 1
        if self._pacer is None or self._pacer.done():
            self._pacer = asyncio.get_running_loop().create_task(self._pace_handshakes())

    async def _pace_handshakes(self) -> None:
        """Begins the waiting connections' handshakes, HANDSHAKES_PER_TURN per turn of the
        loop, taking the addresses in turn.

        A handshake is about a millisecond of the proxy's one core, all in one go when the
        client's first message is read: begun together, a burst of a few hundred (an address
        let in its whole bucket at once) would stop every other request on the loop for as
        many milliseconds. Paced, the other requests run between every few; and an address
        with many waiting delays another's next connection by a turn, not by all of its own."""
        loop = asyncio.get_running_loop()
        while self._waiting:
            for _ in range(HANDSHAKES_PER_TURN):
                if not self._waiting:
                    break
                address = next(iter(self._waiting))
                queue = self._waiting.pop(address)
                connection = queue.popleft()
                self._waiting_count -= 1
                if queue:
                    self._waiting[address] = queue  # to the back of the turn
                task = loop.create_task(self._hand_on(connection))
                self._handing.add(task)
                task.add_done_callback(self._handing.discard)
            await asyncio.sleep(0)

    async def _hand_on(self, connection: socket.socket) -> None:
        """Gives the connection to the loop (the loop owns the socket from then on), after its
        TLS handshake when there is TLS; one that fails its handshake is closed by the loop."""
        self._unhanded.discard(connection)
        # plaintext on a TLS port, a handshake that failed or stalled: closed by the loop
        with contextlib.suppress(OSError, ssl.SSLError, TimeoutError, ConnectionError):
            await asyncio.get_running_loop().connect_accepted_socket(
                self.protocol,
                connection,
                ssl=self.tls,
                ssl_handshake_timeout=self.limits.idle_timeout_s if self.tls else None,
            )

    def protocol(self) -> asyncio.Protocol:
        """The application's protocol for a new connection, or the refusal past the cap."""
        server = self._runner.server
        if server is None:  # stopping: nothing more is served
            return _Refused(0)
        open_now = len(server.connections)
        if open_now >= self.limits.connections_max:
            self.refused += 1
            PROXY_METRICS.connections_refused.add(1, {"reason": "connections_max"})
            return _Refused(open_now)
        return server()

    async def stop(self) -> None:
        self._stopping = True
        self.bar.close()
        if self._server is not None:
            self._server.close()
        pacer = [] if self._pacer is None else [self._pacer]
        for task in [*self._acceptors, *pacer, *self._handing]:
            task.cancel()
        pending = [*self._acceptors, *pacer, *self._handing]
        if pending:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await asyncio.wait(pending)
        # closed once the accept loops ended: an asyncio loop drops a socket's reader an
        # iteration after its accept is cancelled, and a new socket may take its number
        for listening in self._sockets:
            listening.close()
        for reset, timer in list(self._held.items()):  # refused ones held: reset now
            timer.cancel()
            reset()
        self._held.clear()
        for connection in self._unhanded:  # accepted, cancelled before the loop had them
            connection.close()
        self._unhanded.clear()
        self._waiting.clear()
        self._waiting_count = 0
        await self._runner.cleanup()  # ends the open connections
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await self._server.wait_closed()


def _reset(connection: socket.socket) -> None:
    """Closes with a reset, not a close: nothing read, no handshake, no lingering socket."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
    connection.close()


@contextlib.asynccontextmanager
async def body_deadline(request: web.Request, limits: ProxyLimits) -> AsyncIterator[None]:
    """Reading a request's body within `body_timeout_s`, or request_timeout."""
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            yield
    except TimeoutError:
        # The rest of the body is not waited for either: the connection closes once the
        # answer is sent (no lingering read of what the client may still send).
        request.content.feed_eof()
        request.protocol.close()
        raise RequestTimeoutError(
            f"{request.method} {request.path}: its body did not arrive within "
            f"{limits.body_timeout_s:g} s (body_timeout_s)"
        ) from None


async def request_body(request: web.Request, limits: ProxyLimits) -> bytes:
    """The whole body (aiohttp refuses one over `request_bytes_max`), within the deadline."""
    async with body_deadline(request, limits):
        return await request.read()


async def record_body(request: web.Request, limits: ProxyLimits) -> bytes:
    """A single record's body, refused as record_too_large past RECORD_BYTES_MAX."""
    return await bounded_body(request, limits, RECORD_BYTES_MAX, RecordTooLargeError, "a record")


async def bounded_body(
    request: web.Request,
    limits: ProxyLimits,
    most: int,
    too_large: type[GlobelogError],
    what: str,
) -> bytes:
    """A body of at most `most` bytes, refused with `too_large` as soon as it passes them (by
    its Content-Length, or while it arrives): never buffered whole up to the request limit
    first."""
    length = request.content_length
    if length is not None and length > most:
        raise too_large(f"{request.path}: {what} of {length} bytes; the limit is {most}")
    chunks: list[bytes] = []
    size = 0
    async with body_deadline(request, limits):
        async for chunk in request.content.iter_chunked(64 * 1024):
            size += len(chunk)
            if size > most:
                raise too_large(
                    f"{request.path}: {what} of more than {most} bytes (sent without a "
                    f"Content-Length); the limit is {most}"
                )
            chunks.append(chunk)
    return b"".join(chunks)


async def send_page(
    request: web.Request, pieces: list[bytes], send_timeout_s: float
) -> web.StreamResponse:
    """A JSON answer whose body is `pieces` joined, sent before this returns, taken by the
    client within `send_timeout_s` (`sent_within`): in one write when small, else
    SEND_SLICE_BYTES a turn of the loop (the other requests served between), each slice
    within the deadline. Left to aiohttp after the handler, a small page to a client that
    reads nothing would wait in its drain for ever."""
    size = sum(map(len, pieces))
    if request.method == "HEAD":  # its headers alone
        return web.Response(headers={"Content-Length": str(size), "Content-Type": JSON})
    if size <= SEND_SLICE_BYTES:
        page = web.Response(body=b"".join(pieces), content_type=JSON)
        await sent_within(request, _send_whole(request, page), send_timeout_s)
        return page
    response = web.StreamResponse(headers={"Content-Type": JSON})
    response.content_length = size
    await response.prepare(request)
    for index, piece in enumerate(_slices(pieces, SEND_SLICE_BYTES)):
        if index:
            await asyncio.sleep(0)  # the other clients' turn between slices
        if not await sent_within(request, response.write(piece), send_timeout_s):
            return response  # its connection is closed: nothing more is written
    await sent_within(request, response.write_eof(), send_timeout_s)
    return response


def _slices(pieces: list[bytes], most: int) -> Iterator[bytes]:
    """`pieces`, joined, in slices of `most` bytes (the last one shorter)."""
    group: list[memoryview] = []
    size = 0
    for piece in pieces:
        view = memoryview(piece)
        while view:
            taken = view[: most - size]
            group.append(taken)
            size += len(taken)
            view = view[len(taken) :]
            if size == most:
                yield b"".join(group)
                group, size = [], 0
    if group:
        yield b"".join(group)


async def _send_whole(request: web.Request, page: web.Response) -> None:
    await page.prepare(request)
    await page.write_eof()  # the headers and the body in one write


async def sent_within(request: web.Request, sending: Awaitable[None], timeout_s: float) -> bool:
    """Whether `sending` (a write of an answer, which waits while the connection's buffer is
    full) ended within `timeout_s`. A client that takes nothing of an answer for that long
    has its connection closed (aborted: what is buffered for it is dropped), so that it holds
    neither the handler nor the buffered bytes for longer (send_timeout_s). A client that
    went away meanwhile (its connection lost or reset) is not an error of the proxy's."""
    try:
        async with asyncio.timeout(timeout_s):
            await sending
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()
        _count_unsent(request, "send_timeout")
        return False
    except ConnectionError:
        _count_unsent(request, "client_gone")
        return False
    return True


def _count_unsent(request: web.Request, why: str) -> None:
    """An answer its request's status (counted by the metrics middleware) does not say was
    lost: `globelog_proxy_answers_unsent_total{route,why}`."""
    PROXY_METRICS.unsent.add(1, {"route": route_of(request), "why": why})
