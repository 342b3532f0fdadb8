"""The read proxy: serves a region's readers of many streams from one read-ahead per stream.

HTTP API (docs/http-api.md), under /v1:
    GET /v1/health
        {"name", "region", "state": "serving" | "degraded", "streams": {"ns/s": next_seq},
         "not_following": {"ns/s": {"state", "for_s", "restarts", "last_error"}},
         "followers": {"registration" | "bookie membership" | ...: {the same}}}
        degraded while a stream's read-ahead or one of the proxy's followers is not following
    GET /v1/namespaces/{ns}/streams/{stream}/records?from_seq=N&max=M&wait_ms=W
        a page of records from sequence id N (long poll: waits up to W ms for the first)
        {"records": [{"dlsn", "txid", "seq", "write_time_ms", "region",
                      "payload" | "payload_b64"}], "next_seq": N'}
        instead of from_seq: from=earliest | dlsn:S.E.T | txid:T | time:MS (the first page)
    GET /v1/namespaces/{ns}/streams/{stream}/tail?from_seq=N
        the same records as newline-delimited JSON, streamed as they arrive, until the client
        goes away
Reads come from the bookies of the proxy's region first (its ledger client's read order).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from core.dlsn import DLSN
from core.errors import BadRequestError, OverCapacityError, ReadTimeoutError
from core.parsing import bounded_int
from core.records import LogRecord
from global_meta import MetaStore
from global_meta.followers import FollowerStatus
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient
from reader.log_reader import LogReader, ReaderConfig
from reader.positions import By, Position
from region import registry
from region.http_errors import error_middleware, json_response
from region.stream_cache import StreamCache
from region.telemetry import (
    PROXY_METRICS,
    follower_restarts,
    metrics_handler,
    metrics_middleware,
)
from region.tracing import TRACER, traces_handler, tracing_middleware

log = logging.getLogger(__name__)
KIND = "read"
PAGE_RECORDS_MAX = 10_000
# A page's payload bytes (a page holds at least one record, whatever its size): without it,
# `max` records of 1 MiB each would be a 10 GiB answer, built in memory twice (JSON, base64).
PAGE_BYTES_MAX = 4 * 1024 * 1024
# Requests a read proxy serves at once: pages (long polls included) and streamed tails. Past
# either, a request is answered over_capacity (429, retriable) instead of holding a waiter.
READS_MAX = 10_000
TAILS_MAX = 1_000
WAIT_MS_MAX = 30_000
TAIL_POLL_S = 0.5  # a streamed tail checks its client and the proxy's stop this often
HEALTH_STREAMS_MAX = (
    100  # streams named in one health answer's "not_following" (the count is whole)
)


class _Starting:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class _Slots:
    """Requests of one kind served at once, at most `most`; one past it is over_capacity."""

    def __init__(self, what: str, most: int) -> None:
        self.what = what
        self.most = most
        self.taken = 0

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        if self.taken >= self.most:
            raise OverCapacityError(
                f"this read proxy has {self.taken} {self.what}, its most; retry later"
            )
        self.taken += 1
        try:
            yield
        finally:
            self.taken -= 1


class ReadProxy:
    def __init__(self, me: registry.ProxyInfo, store: MetaStore, ledgers: LedgerClient) -> None:
        self.me = me
        self._store = store
        self._ledgers = ledgers
        self._caches: dict[tuple[str, str], StreamCache] = {}
        # Per stream whose cache is being started: its lock and how many requests hold or
        # wait for it; the entry goes with the last of them (names that do not exist leave
        # nothing behind).
        self._starting: dict[tuple[str, str], _Starting] = {}
        self._reads = _Slots("pages being served", READS_MAX)  # long polls included
        self._tails = _Slots("streamed tails open", TAILS_MAX)
        self._runner: web.AppRunner | None = None
        self._stopping = False  # streamed tails end within TAIL_POLL_S once set
        self._membership: registry.Membership | None = None

    def app(self) -> web.Application:
        app = web.Application(
            middlewares=[tracing_middleware(KIND), metrics_middleware(KIND), error_middleware]
        )
        base = "/v1/namespaces/{ns}/streams/{stream}"
        app.router.add_get("/v1/health", self._health)
        app.router.add_get("/metrics", metrics_handler)
        app.router.add_get("/debug/traces", traces_handler)
        app.router.add_get(base + "/records", self._records)
        app.router.add_get(base + "/tail", self._tail)
        return app

    async def start(self, host: str, port: int) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        self._membership = registry.Membership(
            self._store, KIND, self.me, on_failed=follower_restarts(KIND, "registration")
        )
        await self._membership.start()
        log.info("read proxy %s serving at %s", self.me.name, self.me.url)

    async def stop(self) -> None:
        self._stopping = True
        if self._membership is not None:
            await self._membership.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        async with asyncio.TaskGroup() as closing:
            for cache in self._caches.values():
                closing.create_task(cache.close())

    # ------------------------------------------------------------------------ handlers

    async def _health(self, request: web.Request) -> web.Response:
        now_s = time.monotonic()
        cached = {f"{ns}/{s}": c.next_seq for (ns, s), c in self._caches.items()}
        lagging = [
            (f"{ns}/{s}", status)
            for (ns, s), c in self._caches.items()
            if not (status := c.status()).following
        ]
        followers = self._followers()
        degraded = bool(lagging) or not all(f.following for f in followers)
        return json_response(
            {
                "name": self.me.name,
                "region": self.me.region,
                "state": "degraded" if degraded else "serving",
                "streams": cached,
                "not_following": {
                    name: status.describe(now_s) for name, status in lagging[:HEALTH_STREAMS_MAX]
                },
                "not_following_count": len(lagging),
                "followers": {f.name: f.describe(now_s) for f in followers},
            }
        )

    def _followers(self) -> list[FollowerStatus]:
        """The proxy's own followers: its registration, its ledger client's watches."""
        own = [] if self._membership is None else [self._membership.status()]
        return own + self._ledgers.followers()

    async def _records(self, request: web.Request) -> web.Response:
        with self._reads.slot():
            return await self._records_page(request)

    async def _records_page(self, request: web.Request) -> web.Response:
        ns, stream = request.match_info["ns"], request.match_info["stream"]
        max_records = _bounded(request, "max", 1000, 1, PAGE_RECORDS_MAX)
        wait_s = _bounded(request, "wait_ms", 1000, 0, WAIT_MS_MAX) / 1000
        seq = await self._start_seq(request, ns, stream, wait_s)
        if seq is None:
            return json_response({"records": [], "next_seq": None})
        records = await self._page(ns, stream, seq, max_records, wait_s)
        next_seq = records[-1].seq + 1 if records else seq
        return json_response({"records": [_record(r) for r in records], "next_seq": next_seq})

    async def _tail(self, request: web.Request) -> web.StreamResponse:
        with self._tails.slot():
            return await self._stream_tail(request)

    async def _stream_tail(self, request: web.Request) -> web.StreamResponse:
        ns, stream = request.match_info["ns"], request.match_info["stream"]
        seq = _bounded(request, "from_seq", 0, 0, 2**62)
        await self._cache(ns, stream, seq)  # errors (unknown stream) before the 200
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        try:
            while not self._stopping:
                transport = request.transport
                if transport is None or transport.is_closing():
                    break  # the client went away
                records = await self._page(ns, stream, seq, PAGE_RECORDS_MAX, TAIL_POLL_S)
                if records:
                    lines = "".join(json.dumps(_record(r)) + "\n" for r in records)
                    await response.write(lines.encode())
                    seq = records[-1].seq + 1
        except ConnectionResetError:  # the client went away
            pass
        return response

    # -------------------------------------------------------------------------- helpers

    async def _start_seq(
        self, request: web.Request, ns: str, stream: str, wait_s: float
    ) -> int | None:
        """The sequence id the request starts from: given, or found for its position."""
        if "from_seq" in request.query:
            return _bounded(request, "from_seq", 0, 0, 2**62)
        position = _position(request.query.get("from", "earliest"))
        reader = await LogReader.open(
            self._streams(ns), self._ledgers, stream, position, ReaderConfig()
        )
        async with reader:
            try:
                first = await reader.read_next(timeout_s=max(wait_s, 0.001))
            except ReadTimeoutError:
                return None
        return None if first is None else first.seq

    async def _page(
        self, ns: str, stream: str, seq: int, max_records: int, wait_s: float
    ) -> list[LogRecord]:
        records = await self._page_of(ns, stream, seq, max_records, wait_s)
        if records:
            now_ms = time.time() * 1000
            labels = {"region": self.me.region}
            PROXY_METRICS.delivered.add(len(records), labels)
            for record in records:
                delay_s = max(0.0, now_ms - record.write_time_ms) / 1000
                PROXY_METRICS.delivery_latency.record(delay_s, labels)
        return records

    async def _page_of(
        self, ns: str, stream: str, seq: int, max_records: int, wait_s: float
    ) -> list[LogRecord]:
        cache = await self._cache(ns, stream, seq)
        if cache.covers(seq):
            began_s = asyncio.get_running_loop().time()
            with TRACER.start_as_current_span("globelog.read.cache") as span:
                cached = await cache.read(seq, max_records, wait_s)
                span.set_attributes(
                    {
                        "globelog.seq": seq,
                        "globelog.records": len(cached or []),
                        "globelog.left_cache": cached is None,
                    }
                )
            if cached is not None:
                PROXY_METRICS.cache_reads.add(1, {"result": "hit"})
                return within_page_bytes(cached)
            # It left the cache while the request waited (evicted by a burst, or dropped at a
            # truncation): a reader of its own, within what is left of the request's wait.
            wait_s = max(0.0, wait_s - (asyncio.get_running_loop().time() - began_s))
        PROXY_METRICS.cache_reads.add(1, {"result": "miss"})
        # Before what the cache holds: a reader of its own, for this page only.
        reader = await LogReader.open(
            self._streams(ns), self._ledgers, stream, Position(By.SEQ, seq), ReaderConfig()
        )
        records: list[LogRecord] = []
        size = 0  # read until past the page's bytes: the record that passes them is dropped
        async with reader:
            while len(records) < max_records and size <= PAGE_BYTES_MAX:
                try:
                    record = await reader.read_next(timeout_s=wait_s if not records else 0.05)
                except ReadTimeoutError:
                    break
                if record is None:
                    break
                records.append(record)
                size += len(record.payload)
        return within_page_bytes(records)

    async def _cache(self, ns: str, stream: str, seq: int) -> StreamCache:
        key = (ns, stream)
        cache = self._caches.get(key)
        if cache is not None and cache.started and not cache.gone and not _below(cache, seq):
            return cache
        starting = self._starting.get(key)
        if starting is None:
            starting = self._starting[key] = _Starting()
        starting.users += 1
        try:
            async with starting.lock:
                cache = self._caches.get(key)
                # Deleted (perhaps made again), or started past every record so far (by a
                # request from far ahead) and asked for from before that: start afresh.
                if cache is not None and (cache.gone or _below(cache, seq)):
                    del self._caches[key]
                    await cache.close()
                    cache = None
                if cache is None:
                    cache = StreamCache(
                        self._streams(ns),
                        self._ledgers,
                        stream,
                        on_failed=follower_restarts(KIND, "stream cache"),
                    )
                    await cache.start(seq)
                    self._caches[key] = cache
        finally:
            starting.users -= 1
            if starting.users == 0:
                del self._starting[key]
        return cache

    def _streams(self, namespace: str) -> StreamMetaStore:
        return StreamMetaStore(self._store, namespace)


def _below(cache: StreamCache, seq: int) -> bool:
    """True when `seq` is before where `cache` started and the cache holds nothing yet: the
    first request of a stream fixes where its read-ahead starts, and one from far past the
    end (`from_seq=2**62`) would otherwise leave every later reader a reader of its own. A
    read-ahead only ever moves back, and only while moving loses nothing."""
    start = cache.start_seq
    return cache.holds_nothing and start is not None and seq < start


def within_page_bytes(records: list[LogRecord]) -> list[LogRecord]:
    """The records from the first while their payloads fit in PAGE_BYTES_MAX (at least one)."""
    size = 0
    for count, record in enumerate(records):
        size += len(record.payload)
        if size > PAGE_BYTES_MAX and count > 0:
            return records[:count]
    return records


def _record(record: LogRecord) -> dict[str, Any]:
    body: dict[str, Any] = {
        "dlsn": str(record.dlsn),
        "txid": record.txid,
        "seq": record.seq,
        "write_time_ms": record.write_time_ms,
        "region": record.writer_region,
    }
    if record.producer_id is not None:
        body["producer_id"], body["producer_seq"] = record.producer_id, record.producer_seq
    try:
        body["payload"] = record.payload.decode()
    except UnicodeDecodeError:
        body["payload_b64"] = base64.b64encode(record.payload).decode()
    return body


def _position(text: str) -> Position:
    kind, _, value = text.partition(":")
    try:
        if kind == "earliest" and not value:
            return Position.earliest()
        if kind == "dlsn":
            return Position(By.DLSN, DLSN.parse(value))
        if kind in ("txid", "time", "seq"):
            return Position({"txid": By.TXID, "time": By.TIME, "seq": By.SEQ}[kind], int(value))
    except ValueError:
        pass
    raise BadRequestError(f"from={text!r}: expected earliest, dlsn:S.E.T, txid:N, time:MS or seq:N")


def _bounded(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    value = bounded_int(text, low, high)
    if value is None:
        raise BadRequestError(f"query parameter {name}={text!r}: expected an integer {low}..{high}")
    return value
