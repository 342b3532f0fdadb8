"""One-shot bookie round trip (GET_BOOKIE_INFO) to check reachability and measure latency."""

from __future__ import annotations

import ssl
import time

from ledger.codecs.messages import GetBookieInfoRequest
from ledger.connections.connection import BookieConnection, ConnectionConfig
from ledger.errors import BookieConnectionError, BookieTimeoutError, BookieUnreachableError


async def ping_bookie(
    address: str,
    timeout_s: float = 5.0,
    tls: ssl.SSLContext | None = None,
    bookie_id: str | None = None,
) -> float:
    """Seconds for one GET_BOOKIE_INFO request and its response over a fresh connection
    (over `tls` when given, the certificate verified for `bookie_id`, by default `address`).

    The clock starts after the connection is made, so it measures one request round trip.
    """
    config = ConnectionConfig(request_timeout_s=timeout_s, connect_timeout_s=timeout_s, tls=tls)
    try:
        connection = await BookieConnection.open(bookie_id or address, address, config)
    except BookieConnectionError as err:
        raise BookieUnreachableError(f"ping {address}: {err}") from err
    try:
        started = time.perf_counter()
        await connection.call(GetBookieInfoRequest)
        return time.perf_counter() - started
    except BookieTimeoutError as err:
        raise BookieUnreachableError(f"ping {address}: no answer in {timeout_s} s") from err
    except BookieConnectionError as err:
        raise BookieUnreachableError(f"ping {address}: {err}") from err
    finally:
        connection.close()
        await connection.wait_closed()  # aborted: the transport reports it at once
