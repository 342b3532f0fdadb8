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
from region.http_errors import error_body

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
        header deadline, as a request's headers are)."""
        await self._runner.setup()
        server = self._runner.server
        assert server is not None

        def connection() -> asyncio.BaseProtocol:
            open_now = len(server.connections)
            if open_now >= self.limits.connections_max:
                self.refused += 1
                return _Refused(open_now)
            return server()

        self._server = await asyncio.get_running_loop().create_server(
            connection,
            host,
            port,
            reuse_address=True,
            ssl=tls,
            ssl_handshake_timeout=self.limits.idle_timeout_s if tls else None,
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
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
