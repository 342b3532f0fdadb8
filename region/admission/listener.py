"""How a proxy listens: at most `connections_max` connections, each with deadlines.

A slow or silent client holds a connection, and with it memory and a file descriptor, for as
long as the server waits for it. A proxy waits at most `idle_timeout_s` for a request's
headers (from the connection's start, or from the previous answer on a kept-alive
connection) and `body_timeout_s` for its body; past `connections_max` open connections a new
one is answered 429 over_capacity and closed at once, so the connections already open (the
well-behaved clients among them) go on being served.

The idle deadline is longer than a client's own keep-alive (aiohttp's client closes an idle
pooled connection after 15 s), so a proxy does not close a pooled connection just as the
client sends a write on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator

from aiohttp import web

from core.errors import GlobelogError, RecordTooLargeError, RequestTimeoutError
from core.records import RECORD_BYTES_MAX
from core.settings.limits import ProxyLimits
from region.admission.accepts import ConnectionRate
from region.http_errors import error_body
from region.observability.telemetry import PROXY_METRICS

CLOSE_TIMEOUT_S = 10.0
LINGER_S = 2.0
STOP_GRACE_S = 5.0  # at a stop, how long requests being handled get to finish


class _Refused(asyncio.Protocol):
    """A connection past the cap: answered over_capacity, then closed."""

    def __init__(self, open_now: int) -> None:
        self.open_now = open_now

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        body = error_body(
            "over_capacity",
            f"this proxy has {self.open_now} connections open, its most; retry later",
        )
        head = (
            "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
        )
        transport.write(head.encode() + body)
        transport.close()

    def data_received(self, data: bytes) -> None:
        pass  # the request is not read


class _Gate(asyncio.Protocol):
    """A connection just accepted: refused at once when its address opens connections too
    fast (before any TLS handshake), else handed to the application, through TLS when the
    listener has it."""

    def __init__(self, listener: Listener) -> None:
        self._listener = listener

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        listener = self._listener
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if not listener.rate.admit(address):
            PROXY_METRICS.connections_refused.add(1, {"reason": "address_rate"})
            transport.abort()  # a reset: nothing read, no handshake
            return
        if listener.tls is None:
            protocol = listener.protocol()
            transport.set_protocol(protocol)
            protocol.connection_made(transport)
            return
        transport.pause_reading()  # the client's hello waits for the handshake's protocol
        listener.upgrade(transport)

    def data_received(self, data: bytes) -> None:
        pass  # never called: reading is paused, or the connection handed on


class Listener:
    """An aiohttp application served on host:port within `limits`."""

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
        self._server: asyncio.Server | None = None
        self.tls: ssl.SSLContext | None = None
        self.rate = ConnectionRate(
            limits.connections_per_s_per_address, limits.connection_burst_per_address
        )
        self._handshakes: set[asyncio.Task[None]] = set()
        self.refused = 0  # connections refused at the cap, since the start

    @property
    def open_connections(self) -> int:
        server = self._runner.server
        return 0 if server is None else len(server.connections)

    @property
    def port(self) -> int:
        """The port it listens on (the one the kernel chose, for 0)."""
        assert self._server is not None, "not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        """Listens on host:port, with TLS when `tls` is given (its handshake bounded by the
        header deadline, as a request's headers are, and made only for a connection its
        address's rate lets in)."""
        await self._runner.setup()
        self.tls = tls
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Gate(self), host, port, reuse_address=True
        )

    def protocol(self) -> asyncio.Protocol:
        """The application's protocol for a new connection, or the refusal past the cap."""
        server = self._runner.server
        assert server is not None, "not started"
        open_now = len(server.connections)
        if open_now >= self.limits.connections_max:
            self.refused += 1
            PROXY_METRICS.connections_refused.add(1, {"reason": "connections_max"})
            return _Refused(open_now)
        return server()

    def upgrade(self, transport: asyncio.Transport) -> None:
        """Makes the TLS handshake of an admitted connection, then hands it on."""
        task = asyncio.get_running_loop().create_task(self._handshake(transport))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, transport: asyncio.Transport) -> None:
        assert self.tls is not None
        protocol = self.protocol()
        try:
            secure = await asyncio.get_running_loop().start_tls(
                transport,
                protocol,
                self.tls,
                server_side=True,
                ssl_handshake_timeout=self.limits.idle_timeout_s,  # its bound (I8)
            )
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError):
            transport.abort()  # plaintext on a TLS port, a handshake that failed or stalled
            return
        except asyncio.CancelledError:
            transport.abort()
            raise
        if secure is None:  # the connection closed while the handshake ended
            transport.abort()
            return
        protocol.connection_made(secure)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handshakes):
            task.cancel()
        if self._handshakes:
            await asyncio.wait(self._handshakes)
        await self._runner.cleanup()  # ends the open connections
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await self._server.wait_closed()


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
