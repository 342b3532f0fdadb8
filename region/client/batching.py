"""Single writes buffered into bulk writes: each write's future resolves with its acknowledgement
or its batch's error.

    batcher = BatchingWriter(client, "orders", max_records=1000)
    acked = batcher.write(b"one")                          # a future, resolved on acknowledgement
    await batcher.flush()                                  # sends what is buffered, waits for it
"""

from __future__ import annotations

import asyncio

from core.errors import GlobelogError
from region.client.proxy_client import Acked, ProxyClient


class BatchingWriter:
    """Buffers single writes and sends them as bulk writes of up to `max_records`; each
    write's future resolves with its acknowledgement (or the batch's error). Batches go one at
    a time, in the order of the writes: two in flight at once travel on two connections, and
    the later could reach the proxy first and be sequenced before the earlier."""

    def __init__(self, client: ProxyClient, stream: str, max_records: int = 1000) -> None:
        if not 1 <= max_records <= 100_000:
            raise ValueError(f"max_records {max_records}: expected 1..100000")
        self.client = client
        self.stream = stream
        self.max_records = max_records
        self._payloads: list[bytes] = []
        self._futures: list[asyncio.Future[Acked]] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._last: asyncio.Task[None] | None = None  # the batch sent last

    def write(self, payload: bytes) -> asyncio.Future[Acked]:
        future: asyncio.Future[Acked] = asyncio.get_running_loop().create_future()
        self._payloads.append(payload)
        self._futures.append(future)
        if len(self._payloads) >= self.max_records:
            self._send()
        return future

    async def flush(self) -> None:
        """Sends what is buffered and waits until every write so far is answered (each
        write's future holds its outcome). A cancelled flush stops waiting, not the sends."""
        self._send()
        if self._sending:
            await asyncio.wait(set(self._sending))

    def _send(self) -> None:
        if not self._payloads:
            return
        payloads, futures = self._payloads, self._futures
        self._payloads, self._futures = [], []
        task = asyncio.get_running_loop().create_task(self._bulk(payloads, futures, self._last))
        self._last = task
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _bulk(
        self,
        payloads: list[bytes],
        futures: list[asyncio.Future[Acked]],
        previous: asyncio.Task[None] | None,
    ) -> None:
        """Sends one batch once the `previous` one is answered (its outcome is its writes'
        futures', whatever it is); every one of its futures ends, with its acknowledgement or
        with the batch's error, whatever that error is (a future left pending would hang its
        writer for ever). The wait ends: each batch's write is bounded by the client's
        deadline."""
        try:
            if previous is not None:
                await asyncio.wait({previous})
            acked = await self.client.write_bulk(self.stream, payloads)
            if len(acked) != len(futures):
                raise GlobelogError(
                    f"bulk write to stream {self.stream!r}: {len(futures)} records sent, "
                    f"{len(acked)} acknowledged"
                )
        except asyncio.CancelledError:
            for future in futures:
                future.cancel()
            raise
        except Exception as err:  # noqa: BLE001 - handed to the writes' futures
            for future in futures:
                if not future.done():
                    future.set_exception(err)
            return
        for future, one in zip(futures, acked, strict=True):
            if not future.done():
                future.set_result(one)
