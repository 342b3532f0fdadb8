"""One-shot bookie round trip (GET_BOOKIE_INFO) to check reachability and measure latency."""

from __future__ import annotations

import asyncio
import time

from core.errors import GlobelogError
from ledger.frames import FrameDecoder, encode_request
from ledger.messages import GetBookieInfoRequest, GetBookieInfoResponse

PING_READ_BYTES = 65536


class BookieUnreachableError(GlobelogError):
    """No answer from a bookie address within the timeout (down, paused or partitioned)."""

    code = "bookie_unreachable"
    retriable = True


async def ping_bookie(address: str, timeout_s: float = 5.0) -> float:
    """Seconds for one GET_BOOKIE_INFO request and its response over a fresh connection.

    The clock starts after the TCP connection is made, so it measures one request round trip.
    """
    host, port = address.rsplit(":", 1)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout_s)
    except (OSError, TimeoutError) as err:
        raise BookieUnreachableError(f"ping {address}: cannot connect: {err!r}") from err
    try:
        decoder = FrameDecoder()
        started = time.perf_counter()
        writer.write(encode_request(GetBookieInfoRequest(txn_id=1)))
        async with asyncio.timeout(timeout_s):
            while True:
                data = await reader.read(PING_READ_BYTES)
                if not data:
                    raise BookieUnreachableError(f"ping {address}: connection closed")
                for response in decoder.feed(data):
                    if isinstance(response, GetBookieInfoResponse) and response.txn_id == 1:
                        return time.perf_counter() - started
    except TimeoutError as err:
        raise BookieUnreachableError(f"ping {address}: no answer in {timeout_s} s") from err
    except OSError as err:
        raise BookieUnreachableError(f"ping {address}: {err!r}") from err
    finally:
        writer.close()
