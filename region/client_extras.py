"""More of globelog's Python client: reading through the read proxies, a batching writer, and
a synchronous wrapper for code that does not run an event loop.

    async with ReadClient(["http://127.0.0.1:8201"], "default") as reader:
        async for record in reader.read("orders", from_seq=0):
            ...                                            # ReadRecord(seq, dlsn, payload, ...)

    batcher = BatchingWriter(client, "orders", max_records=1000)
    acked = batcher.write(b"one")                          # a future, resolved on acknowledgement
    await batcher.flush()                                  # sends what is buffered, waits for it

    with SyncProxyClient(["http://127.0.0.1:8101"]) as client:
        client.write("orders", b"payload")                 # blocks until acknowledged
"""

from __future__ import annotations

import asyncio
import base64
import random
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp

from core.dlsn import DLSN
from core.errors import GlobelogError
from region.client import Acked, ProxyClient, ProxyUnreachableError, proxy_error

POLL_WAIT_MS = 1000
PAGE_RECORDS = 1000
RETRY_S = 0.2
# How long a read goes on failing (every proxy unreachable, or answering a retriable error)
# before it raises the last error: long enough for a proxy's restart or a ZooKeeper session's
# return after a heal, short enough that a reader is told its region cannot serve it.
READ_FAILING_MAX_S = 30.0
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ReadRecord:
    seq: int
    dlsn: DLSN
    txid: int
    payload: bytes
    write_time_ms: int
    writer_region: str
    producer_id: int | None = None
    producer_seq: int | None = None


class ReadClient:
    """Reads streams through a region's read proxies (long-poll pages), retrying through a
    proxy's restart or a region's outage on the next proxy of the list."""

    def __init__(
        self,
        proxies: Sequence[str],
        namespace: str = "default",
        failing_max_s: float = READ_FAILING_MAX_S,
    ) -> None:
        if not proxies:
            raise ValueError("ReadClient needs at least one read proxy URL, got none")
        if not 0 < failing_max_s <= 3600:
            raise ValueError(f"failing_max_s {failing_max_s}: expected 0 < seconds <= 3600")
        self.namespace = namespace
        self.failing_max_s = failing_max_s
        self._proxies = [p.rstrip("/") for p in proxies]
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ReadClient:
        timeout = aiohttp.ClientTimeout(total=POLL_WAIT_MS / 1000 + 10)
        self._http = aiohttp.ClientSession(timeout=timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()

    async def read(
        self, stream: str, from_seq: int = 0, follow: bool = True
    ) -> AsyncIterator[ReadRecord]:
        """Every record from sequence id `from_seq` on, in order; with `follow`, waits for
        new ones for ever, else stops at the first empty page. Failures (a proxy down, a
        retriable answer) are retried on the next proxy; after `failing_max_s` of nothing but
        failures the last one is raised, a non-retriable answer at once."""
        if self._http is None:
            raise RuntimeError("use `async with ReadClient(...)` before reading")
        seq = from_seq
        proxy = random.randrange(len(self._proxies))
        failing_since: float | None = None
        while True:
            url = f"{self._proxies[proxy]}/v1/namespaces/{self.namespace}/streams/{stream}/records"
            query = {"from_seq": str(seq), "max": str(PAGE_RECORDS), "wait_ms": str(POLL_WAIT_MS)}
            try:
                async with self._http.get(url, params=query) as answer:
                    page = await answer.json(content_type=None)
                    if answer.status != 200:
                        raise proxy_error(page, answer.status, f"GET {url} from_seq={seq}")
            except (aiohttp.ClientError, TimeoutError, ValueError, GlobelogError) as err:
                if isinstance(err, GlobelogError) and not err.retriable:
                    raise
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since >= self.failing_max_s:
                    where = (
                        f"read {stream!r} from seq {seq}: no read proxy of {self._proxies} "
                        f"served it for {now - failing_since:.1f} s"
                    )
                    if isinstance(err, GlobelogError):
                        err.add_note(where)
                        raise
                    raise ProxyUnreachableError(f"{where}; the last failure: {err!r}") from err
                proxy = (proxy + 1) % len(self._proxies)
                await asyncio.sleep(RETRY_S)
                continue
            failing_since = None
            records = page["records"]
            for body in records:
                yield _record(body)
            if records:
                seq = records[-1]["seq"] + 1
            elif not follow:
                return


def _record(body: dict[str, Any]) -> ReadRecord:
    payload = (
        body["payload"].encode() if "payload" in body else base64.b64decode(body["payload_b64"])
    )
    return ReadRecord(
        int(body["seq"]), DLSN.parse(body["dlsn"]), int(body["txid"]), payload,
        int(body["write_time_ms"]), str(body["region"]),
        body.get("producer_id"), body.get("producer_seq"),
    )  # fmt: skip


class BatchingWriter:
    """Buffers single writes and sends them as bulk writes of up to `max_records`; each
    write's future resolves with its acknowledgement (or the batch's error)."""

    def __init__(self, client: ProxyClient, stream: str, max_records: int = 1000) -> None:
        if not 1 <= max_records <= 100_000:
            raise ValueError(f"max_records {max_records}: expected 1..100000")
        self.client = client
        self.stream = stream
        self.max_records = max_records
        self._payloads: list[bytes] = []
        self._futures: list[asyncio.Future[Acked]] = []
        self._sending: set[asyncio.Task[None]] = set()

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
        task = asyncio.get_running_loop().create_task(self._bulk(payloads, futures))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _bulk(self, payloads: list[bytes], futures: list[asyncio.Future[Acked]]) -> None:
        """Sends one batch; every one of its futures ends, with its acknowledgement or with
        the batch's error, whatever that error is (a future left pending would hang its
        writer for ever)."""
        try:
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


class SyncProxyClient:
    """ProxyClient for synchronous code: an event loop on a thread of its own runs each call;
    every method blocks until its answer (or raises the same errors)."""

    def __init__(self, proxies: Sequence[str], namespace: str = "default", **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._client = ProxyClient(proxies, namespace, **options)
        self._run(self._client.__aenter__())

    def _run(self, call: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(call, self._loop).result()

    def __enter__(self) -> SyncProxyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_running():
            self._run(self._client.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()

    def create(self, stream: str) -> None:
        self._run(self._client.create(stream))

    def write(self, stream: str, payload: bytes, **options: Any) -> Acked:
        return self._run(self._client.write(stream, payload, **options))

    def write_bulk(self, stream: str, payloads: Sequence[bytes], **options: Any) -> list[Acked]:
        return self._run(self._client.write_bulk(stream, payloads, **options))

    def describe(self, stream: str) -> dict[str, Any]:
        return self._run(self._client.describe(stream))

    def last_dlsn(self, stream: str) -> DLSN | None:
        return self._run(self._client.last_dlsn(stream))
