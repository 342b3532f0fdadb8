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
Everything a client can make it hold is bounded by core/settings/limits.py's ProxyLimits: pages, long
polls and tails at once, a page's records and bytes, the read-aheads' number, bytes and idle
time, and each client's read quota.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections import OrderedDict
from collections.abc import Callable

from aiohttp import web

from core import runtime
from core.dlsn import DLSN
from core.errors import (
    BadRequestError,
    ReadTimeoutError,
    UnauthenticatedError,
)
from core.parsing import bounded_int
from core.records import LogRecord
from core.settings.limits import ProxyLimits
from global_meta import MetaSession
from global_meta.followers import Follower, FollowerStatus
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient
from reader.log_reader import LogReader, ReaderConfig
from reader.positions import By, Position
from region import registry
from region.admission.listener import Listener, send_page, sent_within
from region.admission.quotas import Quotas, client_of, quota_middleware
from region.admission.slots import ClientTurns, Slots, UnsentBytes
from region.bodies.pages import (
    ENCODE_SLICE_RECORDS,
    encode_slices,
    page_pieces,
    record_json,
    within_page_bytes,
)
from region.http_errors import error_middleware, json_response
from region.observability.telemetry import (
    PROXY_METRICS,
    follower_restarts,
    metrics_handler,
    metrics_middleware,
)
from region.observability.tracing import child_span, traces_handler, tracing_middleware
from region.reads.stream_cache import CacheBudget, StreamCache
from region.security.gate import TOKEN, Rule, Rules, require_rules
from region.security.service import ProxySecurity

log = logging.getLogger(__name__)
KIND = "read"
TAIL_POLL_S = 0.5  # a streamed tail checks its client and the proxy's stop this often
HEALTH_STREAMS_MAX = 100  # streams named in one health answer (the counts are whole)
SWEEP_S = 5.0  # how often idle read-aheads are looked for
FOLLOWING_GRACE_S = 1.0  # past cache_following_max, a read-ahead read this lately still follows
STREAM = "/v1/namespaces/{ns}/streams/{stream}"
# Who may call what (docs/http-api.md, "Access"): every route has its rule.
RULES: Rules = {
    ("GET", "/v1/health"): Rule("observe", "proxy"),
    ("GET", "/metrics"): Rule("observe", "proxy"),
    ("GET", "/debug/traces"): Rule("observe", "proxy"),
    ("GET", STREAM + "/records"): Rule("read", "stream"),
    ("GET", STREAM + "/tail"): Rule("read", "stream"),
}


class _Starting:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class ReadProxy:
    def __init__(
        self,
        me: registry.ProxyInfo,
        store: MetaSession,
        ledgers: LedgerClient,
        limits: ProxyLimits | None = None,
        security: ProxySecurity | None = None,
        predecessor_wait_s: float = 0.0,  # registry.register's
    ) -> None:
        self.me = me
        self._predecessor_wait_s = predecessor_wait_s
        self.security = security
        self.limits = limits = limits or ProxyLimits()
        self.quotas = Quotas(limits, "read")
        self._store = store
        self._ledgers = ledgers
        # Least recently read first: the first to go past cache_streams_max or the budget.
        self._caches: OrderedDict[tuple[str, str], StreamCache] = OrderedDict()
        self._budget = CacheBudget(limits.cache_bytes_max, self._caches.values)
        self._sweeper = Follower(
            "read-ahead sweep", self._sweep, on_failed=follower_restarts(KIND, "sweep")
        )
        # Per stream whose cache is being started: its lock and how many requests hold or
        # wait for it; the entry goes with the last of them (names that do not exist leave
        # nothing behind).
        self._starting: dict[tuple[str, str], _Starting] = {}
        # long polls included
        holds = self.quotas.holds
        self._reads = Slots(
            "pages being served", limits.reads_max, limits.reads_per_client_max, holds
        )
        self._tails = Slots(
            "streamed tails open", limits.tails_max, limits.tails_per_client_max, holds
        )
        self._unsent = UnsentBytes(limits.send_bytes_max, limits.client_send_bytes_max, holds)
        self._turns = ClientTurns()  # one batch of a client's tails at a time
        held = PROXY_METRICS.held_bytes
        held.follow(self, lambda proxy: proxy._budget.used, {"what": "cache"})
        held.follow(self, lambda proxy: proxy._unsent.used, {"what": "unsent"})
        self._listener: Listener | None = None
        self._stopping = False  # streamed tails end within TAIL_POLL_S once set
        self._membership: registry.Membership | None = None

    def app(self) -> web.Application:
        gate = self.security.middlewares(RULES) if self.security else []
        app = web.Application(
            middlewares=[
                tracing_middleware(KIND),
                metrics_middleware(KIND),
                error_middleware,
                *gate,
                quota_middleware(self.quotas, lambda _: False),  # bytes: once the page is built
            ]
        )
        base = STREAM
        app.router.add_get("/v1/health", self._health)
        app.router.add_get("/metrics", metrics_handler)
        app.router.add_get("/debug/traces", traces_handler)
        app.router.add_get(base + "/records", self._records)
        app.router.add_get(base + "/tail", self._tail)
        require_rules(app, RULES)
        return app

    async def start(self, host: str, port: int) -> None:
        if self.security:
            await self.security.start()
        self._listener = Listener(self.app(), self.limits)
        await self._listener.start(host, port, self.security.ssl if self.security else None)
        self._sweeper.start()
        self._membership = registry.Membership(
            self._store,
            KIND,
            self.me,
            on_failed=follower_restarts(KIND, "registration"),
            predecessor_wait_s=self._predecessor_wait_s,
        )
        await self._membership.start()
        log.info("read proxy %s serving at %s", self.me.name, self.me.url)

    async def stop(self) -> None:
        self._stopping = True
        if self._membership is not None:
            await self._membership.stop()
        if self._listener is not None:
            await self._listener.stop()
        await self._sweeper.stop()
        async with asyncio.TaskGroup() as closing:
            for cache in self._caches.values():
                closing.create_task(cache.close())
        if self.security:
            await self.security.stop()

    # ------------------------------------------------------------------------ handlers

    async def _health(self, request: web.Request) -> web.Response:
        now_s = runtime.monotonic()
        cached = {
            f"{ns}/{s}": c.next_seq
            for (ns, s), c in itertools.islice(reversed(self._caches.items()), HEALTH_STREAMS_MAX)
        }
        lagging = [
            (f"{ns}/{s}", status)
            for (ns, s), c in self._caches.items()
            if not c.paused and not (status := c.status()).following
        ]
        followers = [self._sweeper.status(), *self._followers()]
        degraded = bool(lagging) or not all(f.following for f in followers)
        return json_response(
            {
                "name": self.me.name,
                "region": self.me.region,
                "state": "degraded" if degraded else "serving",
                "streams": cached,  # the most recently read
                "streams_count": len(self._caches),
                "streams_paused": sum(c.paused for c in self._caches.values()),
                "cache_bytes": self._budget.used,
                "unsent_bytes": self._unsent.used,  # built, not yet taken by their clients
                "not_following": {
                    name: status.describe(now_s) for name, status in lagging[:HEALTH_STREAMS_MAX]
                },
                "not_following_count": len(lagging),
                "followers": {f.name: f.describe(now_s) for f in followers},
            }
        )

    def _followers(self) -> list[FollowerStatus]:
        """The proxy's own followers: its registration, its security's, its ledger client's
        watches."""
        own = [] if self._membership is None else [self._membership.status()]
        if self.security is not None:
            own += self.security.followers()
        return own + self._ledgers.followers()

    async def _records(self, request: web.Request) -> web.StreamResponse:
        client = client_of(request)
        if refused := self._unsent.refusal(client):  # its pages wait for it: it reads no more
            await self._unsent.refuse(client, refused)
        async with self._reads.slot(client):
            pieces = await self._records_page(request)
        size = sum(map(len, pieces))
        self._take_bytes(request, request.match_info["ns"], size)  # refused or not: it was built
        if refused := self._unsent.refusal(client, size):
            del pieces  # not kept while the refusal is held
            await self._unsent.refuse(client, refused)
        # sent with the read slot let go (a client slow to read holds no one else's slot),
        # its bytes held until it is taken
        with self._unsent.held(client, size):
            return await send_page(request, pieces, self.limits.send_timeout_s)

    async def _records_page(self, request: web.Request) -> list[bytes]:
        """The page a request asks for, its body in pieces (`page_pieces`; its bytes not yet
        charged)."""
        ns, stream = request.match_info["ns"], request.match_info["stream"]
        limits = self.limits
        max_records = _bounded(request, "max", 1000, 1, limits.page_records_max)
        wait_s = _bounded(request, "wait_ms", 1000, 0, limits.wait_ms_max) / 1000
        seq = await self._start_seq(request, ns, stream, wait_s)
        if seq is None:
            return page_pieces([], None)
        records = await self._page(ns, stream, seq, max_records, wait_s, client_of(request))
        next_seq = records[-1].seq + 1 if records else seq
        encodings: list[bytes] = []
        for batch in encode_slices(records):
            if encodings:
                await asyncio.sleep(0)  # the other clients' turn between slices
            encodings += self._encodings(ns, stream, batch)
        return page_pieces(encodings, next_seq)

    async def _tail(self, request: web.Request) -> web.StreamResponse:
        async with self._tails.slot(client_of(request)):
            return await self._stream_tail(request)

    async def _stream_tail(self, request: web.Request) -> web.StreamResponse:
        ns, stream = request.match_info["ns"], request.match_info["stream"]
        seq = _bounded(request, "from_seq", 0, 0, 2**62)
        await self._cache(ns, stream, seq, client_of(request))  # errors before the 200
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        sent_at = loop.time()  # the last line sent: an idle tail sends a blank one now and then
        send_s = self.limits.send_timeout_s
        try:
            while not self._stopping:
                if _gone(request):
                    break
                if await self._token_ended(request, response):
                    break
                # A client past its read quota gets nothing more until it is within it again
                # (its tails slow down to the quota).
                client = client_of(request)
                if (over_s := self.quotas.wait_s(client, ns)) > 0:
                    await asyncio.sleep(min(over_s, TAIL_POLL_S))
                    continue
                if self._unsent.over(client):  # its pages or other tails wait for it
                    await asyncio.sleep(TAIL_POLL_S)
                    continue
                # from the read-ahead, a batch at a time: a hundred tails catching up at once
                # each looked at a whole page of records in one turn of the loop
                records = await self._page(
                    ns, stream, seq, self.limits.page_records_max, TAIL_POLL_S, client, False,
                    cached_max=ENCODE_SLICE_RECORDS,
                )  # fmt: skip
                if not records:
                    if loop.time() - sent_at >= self.limits.tail_keepalive_s:
                        # alive, nothing new (clients skip it)
                        if not await sent_within(request, response.write(b"\n"), send_s):
                            break
                        sent_at = loop.time()
                    continue
                for batch in encode_slices(records):
                    if not await self._send_batch(request, response, ns, stream, batch):
                        return response
                    seq = batch[-1].seq + 1
                    sent_at = loop.time()
        except ConnectionResetError:  # the client went away
            pass
        return response

    async def _send_batch(
        self,
        request: web.Request,
        response: web.StreamResponse,
        ns: str,
        stream: str,
        batch: list[LogRecord],
    ) -> bool:
        """A tail's batch of records, sent on its client's turn (ClientTurns) once the client
        is within its read quota and its unsent bytes: checked before every batch, so a
        hundred tails catching up at once slow down to the quota too, rather than each
        sending its whole catch-up on a quota checked once. The turn covers the checks, the
        encoding and the write's start, not the wait for the client to take it (a tail whose
        reader is slow holds up only itself). False when the tail ends: the proxy stops, the
        client went, its token ended, or it took nothing for send_timeout_s."""
        client = client_of(request)
        while True:
            while (over_s := self.quotas.wait_s(client, ns)) > 0 or self._unsent.over(client):
                if self._stopping or _gone(request):  # waited without the turn: per namespace
                    return False
                await asyncio.sleep(min(over_s, TAIL_POLL_S) if over_s > 0 else TAIL_POLL_S)
            async with self._turns.turn(client):
                if self._stopping or _gone(request) or await self._token_ended(request, response):
                    return False  # (found so after waiting for the turn)
                if self.quotas.wait_s(client, ns) > 0 or self._unsent.over(client):
                    continue  # over again meanwhile: wait without the turn
                lines = b"\n".join(self._encodings(ns, stream, batch)) + b"\n"
                self._take_bytes(request, ns, len(lines))
                with self._unsent.held(client, len(lines)):
                    sending = asyncio.ensure_future(response.write(lines))
                    try:
                        await asyncio.sleep(0)  # its start: the bytes handed to the transport
                    except BaseException:
                        sending.cancel()
                        raise
            break
        with self._unsent.held(client, len(lines)):
            return await sent_within(request, sending, self.limits.send_timeout_s)

    async def _token_ended(self, request: web.Request, response: web.StreamResponse) -> bool:
        """Whether the tail's token was revoked or has expired; if so the tail is told why,
        in a last line."""
        token = request.get(TOKEN)
        gate = self.security.gate if self.security else None
        if token is None or gate is None:
            return False
        try:
            gate.still_valid(token)
        except UnauthenticatedError as err:
            refusal = {"code": err.code, "message": str(err), "retriable": False}
            line = json.dumps(refusal).encode() + b"\n"
            await sent_within(request, response.write(line), self.limits.send_timeout_s)
            return True
        return False

    # -------------------------------------------------------------------------- helpers

    def _opens_reader(self, client: str, ns: str) -> None:
        """A reader is opened for the client: it costs `reader_open_cost` requests of its
        quota (the one it was let in with included)."""
        self.quotas.take_requests(client, ns, self.limits.reader_open_cost - 1)

    def _encodings(self, ns: str, stream: str, records: list[LogRecord]) -> list[bytes]:
        """Each record as served (JSON): kept by the stream's read-ahead when they came from
        it (each encoded once for all of its readers), else made now."""
        cache = self._caches.get((ns, stream))
        found = None if cache is None else cache.encoded(records)
        return found if found is not None else [record_json(r) for r in records]

    def _take_bytes(self, request: web.Request, ns: str, size: int) -> None:
        """Charges an answer's bytes (its records as sent) to the client's read quota."""
        self.quotas.take_bytes(client_of(request), ns, size)

    async def _sweep(self, following: Callable[[], None]) -> None:
        """Closes the read-aheads no request read for `cache_idle_s`, and those of deleted
        streams: each holds a follow reader, its watches and up to its bytes. Pauses those no
        request read for `cache_follow_idle_s`, and past `cache_following_max` following, the
        least recently read (region/reads/stream_cache.py)."""
        following()
        loop = asyncio.get_running_loop()
        while True:
            limits = self.limits
            await asyncio.sleep(min(SWEEP_S, limits.cache_idle_s / 2, limits.cache_follow_idle_s))
            now = loop.time()
            done = [
                key
                for key, cache in self._caches.items()
                if cache.read_at < now - limits.cache_idle_s or cache.gone
            ]
            for key in done:
                await self._close_cache(key)
            quiet = now - limits.cache_follow_idle_s
            for cache in [c for c in self._caches.values() if c.read_at < quiet and c.pausable]:
                await cache.pause(read_before=quiet)  # (not if read meanwhile)
            # past cache_following_max, the least recently read first (the dict's order)
            live = [c for c in self._caches.values() if c.started and not c.paused]
            over = len(live) - limits.cache_following_max
            lately = now - FOLLOWING_GRACE_S
            for cache in [c for c in live if c.read_at < lately and c.pausable][: max(over, 0)]:
                await cache.pause(read_before=lately)

    async def _close_cache(self, key: tuple[str, str]) -> None:
        cache = self._caches.pop(key, None)
        if cache is not None:
            await cache.close()

    async def _start_seq(
        self, request: web.Request, ns: str, stream: str, wait_s: float
    ) -> int | None:
        """The sequence id the request starts from: given, or found for its position."""
        if "from_seq" in request.query:
            return _bounded(request, "from_seq", 0, 0, 2**62)
        position = _position(request.query.get("from", "earliest"))
        self._opens_reader(client_of(request), ns)
        reader = await LogReader.open(
            self._streams(ns), self._ledgers, stream, position, ReaderConfig()
        )
        async with reader:
            try:
                first_record = await reader.read_next_written(max(wait_s, 1e-3))
            except ReadTimeoutError:
                return None
        return None if first_record is None else first_record.seq

    async def _page(
        self,
        ns: str,
        stream: str,
        seq: int,
        max_records: int,
        wait_s: float,
        client: str,
        catch_up: bool = True,
        cached_max: int | None = None,
    ) -> list[LogRecord]:
        """Records from `seq`, waiting up to `wait_s` for the first, and with `catch_up` up to
        CATCH_UP_S while the read-ahead still reads records that are there (a page: a short
        wait must not answer an empty page while records exist; a tail asks again anyway,
        and checks on its client every TAIL_POLL_S). `cached_max`: fewer records when they
        come from the read-ahead (a tail's batch: its next is as cheap to ask for; a reader of
        its own is worth a whole page)."""
        cache = await self._cache(ns, stream, seq, client)
        if cache.covers(seq):
            began_s = asyncio.get_running_loop().time()
            most = max_records if cached_max is None else min(max_records, cached_max)
            with child_span("globelog.read.cache") as span:
                cached = await cache.read(seq, most, wait_s, catch_up=catch_up)
                if span.is_recording():
                    span.set_attributes(
                        {
                            "globelog.seq": seq,
                            "globelog.records": len(cached or []),
                            "globelog.left_cache": cached is None,
                        }
                    )
            if cached is not None:
                PROXY_METRICS.cache_reads.add(1, {"result": "hit"})
                return self._delivered(within_page_bytes(cached, self.limits.page_bytes_max))
            # It left the cache while the request waited (evicted by a burst, or dropped at a
            # truncation): a reader of its own, within what is left of the request's wait.
            wait_s = max(0.0, wait_s - (asyncio.get_running_loop().time() - began_s))
        PROXY_METRICS.cache_reads.add(1, {"result": "miss"})
        # Before what the cache holds: a reader of its own, for this page only.
        self._opens_reader(client, ns)
        reader = await LogReader.open(
            self._streams(ns), self._ledgers, stream, Position(By.SEQ, seq), ReaderConfig()
        )
        records: list[LogRecord] = []
        size = 0  # read until past the page's bytes: the record that passes them is dropped
        async with reader:
            while len(records) < max_records and size <= self.limits.page_bytes_max:
                try:  # the first record as a long poll waits for it, the next ones briefly
                    # (a reader of its own waits for records that are there in any case: a tail
                    # that asked again would open another)
                    record = await (
                        reader.read_next(0.05) if records else reader.read_next_written(wait_s)
                    )
                except ReadTimeoutError:
                    break
                if record is None:
                    break
                records.append(record)
                size += len(record.payload)
        return self._delivered(within_page_bytes(records, self.limits.page_bytes_max))

    def _delivered(self, records: list[LogRecord]) -> list[LogRecord]:
        """Counts the records served; the delivery latency of the newest, once per answer:
        per record, the histogram's bookkeeping (tens of microseconds) was half of what a
        tail catching up cost the proxy, more than encoding the records."""
        if records:
            labels = {"region": self.me.region}
            PROXY_METRICS.delivered.add(len(records), labels)
            delay_ms = max(0.0, runtime.wall_s() * 1000 - records[-1].write_time_ms)
            PROXY_METRICS.delivery_latency.record(delay_ms / 1000, labels)
        return records

    async def _cache(self, ns: str, stream: str, seq: int, client: str) -> StreamCache:
        key = (ns, stream)
        cache = self._caches.get(key)
        if cache is not None and cache.started and not cache.gone and not _below(cache, seq):
            self._read_now(key, cache)  # first: the sweep leaves it open while it resumes
            if cache.paused and await cache.resume():
                self._opens_reader(client, ns)  # following again costs what opening a reader does
            if not cache.gone:  # (deleted while paused: started afresh below)
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
                    await self._close_cache(key)
                    cache = None
                if cache is None:
                    self._opens_reader(client, ns)
                    cache = StreamCache(
                        self._streams(ns),
                        self._ledgers,
                        stream,
                        bytes_max=self.limits.cache_stream_bytes_max,
                        on_failed=follower_restarts(KIND, "stream cache"),
                        budget=self._budget,
                        encode=record_json,
                    )
                    await cache.start(seq)
                    while len(self._caches) >= self.limits.cache_streams_max:
                        # the least recently read goes (its readers go to readers of their own)
                        await self._close_cache(next(iter(self._caches)))
                    self._caches[key] = cache
        finally:
            starting.users -= 1
            if starting.users == 0:
                del self._starting[key]
        return self._read_now(key, cache)

    def _read_now(self, key: tuple[str, str], cache: StreamCache) -> StreamCache:
        """Notes that `cache` is read now: the most recently read, the last to go."""
        if key in self._caches:
            self._caches.move_to_end(key)
        cache.read_at = asyncio.get_running_loop().time()
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


def _gone(request: web.Request) -> bool:
    """Whether the client of `request` went away (its connection closed or closing)."""
    transport = request.transport
    return transport is None or transport.is_closing()


def _bounded(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    value = bounded_int(text, low, high)
    if value is None:
        raise BadRequestError(f"query parameter {name}={text!r}: expected an integer {low}..{high}")
    return value
