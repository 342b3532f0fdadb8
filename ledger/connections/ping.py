"""One-shot bookie round trip (GET_BOOKIE_INFO) to check reachability and measure latency."""

from __future__ import annotations

import time

from ledger.codecs.messages import GetBookieInfoRequest
from ledger.connections.connection import BookieConnection, ConnectionConfig
from ledger.errors import BookieConnectionError, BookieTimeoutError, BookieUnreachableError


async def ping_bookie(address: str, timeout_s: float = 5.0) -> float:
    """Seconds for one GET_BOOKIE_INFO request and its response over a fresh connection.

    The clock starts after the TCP connection is made, so it measures one request round trip.
    """
    config = ConnectionConfig(request_timeout_s=timeout_s, connect_timeout_s=timeout_s)
    try:
        connection = await BookieConnection.open(address, address, config)
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
