"""Bookie round trips (GET_BOOKIE_INFO) to check reachability and measure latency: one-shot,
or over connections kept from one ping to the next."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time

from ledger.codecs.messages import GetBookieInfoRequest
from ledger.connections.connection import BookieConnection, ConnectionConfig
from ledger.errors import (
    BookieConnectionError,
    BookieTimeoutError,
    BookieUnreachableError,
    ClientClosedError,
    ProtocolError,
)

CLOSE_TIMEOUT_S = 1.0


async def ping_bookie(
    address: str,
    timeout_s: float = 5.0,
    tls: ssl.SSLContext | None = None,
    bookie_id: str | None = None,
) -> float:
    """Seconds for one GET_BOOKIE_INFO request and its response over a fresh connection
    (over `tls` when given, the certificate verified for `bookie_id`, by default `address`).

    The clock starts after the connection is made, so it measures one request round trip;
    `timeout_s` bounds the connection's making and, again, the request.
    """
    pinger = BookiePinger(tls)
    try:
        return await pinger.ping(address, timeout_s, bookie_id)
    finally:
        await pinger.close()


class BookiePinger:
    """Round trips to bookies over connections kept between pings, for a caller that asks
    the same bookies again and again (the console, once a second): one TLS handshake per
    bookie instead of one per ping, on both ends. A connection that failed or timed out is
    dropped and the next ping makes a fresh one, so a ping still says whether a new
    connection could be made."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self._tls = tls
        self._kept: dict[tuple[str, str], BookieConnection] = {}
        self.connections_made = 0

    async def ping(self, address: str, timeout_s: float, bookie_id: str | None = None) -> float:
        """Seconds for one GET_BOOKIE_INFO round trip to `address` (certificate checked for
        `bookie_id`, by default `address`); BookieUnreachableError if a connection cannot be
        made within `timeout_s` or the request is not answered within `timeout_s`."""
        key = (address, bookie_id or address)
        connection = self._kept.get(key)
        if connection is None or not connection.is_open:
            connection = await self._connect(key, timeout_s)
        try:
            started = time.perf_counter()
            await connection.call(GetBookieInfoRequest, timeout_s)
            return time.perf_counter() - started
        except (BookieConnectionError, ClientClosedError) as err:
            if self._kept.get(key) is connection:
                del self._kept[key]
            connection.close()
            what = f"no answer in {timeout_s} s" if isinstance(err, BookieTimeoutError) else err
            raise BookieUnreachableError(f"ping {address}: {what}") from err

    async def _connect(self, key: tuple[str, str], timeout_s: float) -> BookieConnection:
        address, bookie_id = key
        config = ConnectionConfig(
            request_timeout_s=timeout_s, connect_timeout_s=timeout_s, tls=self._tls
        )
        try:
            made = await BookieConnection.open(bookie_id, address, config)
        except (BookieConnectionError, ProtocolError) as err:  # ProtocolError: START_TLS's
            raise BookieUnreachableError(f"ping {address}: {err}") from err
        kept = self._kept.get(key)
        if kept is not None and kept.is_open:  # another ping connected meanwhile: share it
            made.close()
            return kept
        self._kept[key] = made
        self.connections_made += 1
        return made

    async def close(self) -> None:
        kept, self._kept = list(self._kept.values()), {}
        for connection in kept:
            connection.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):  # aborted: reported within a loop turn
                for connection in kept:
                    await connection.wait_closed()
