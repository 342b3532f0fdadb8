"""The write proxy: an aiohttp server that owns streams and appends to them for clients.

HTTP API (docs/http-api.md), every path under /v1:
    GET    /v1/health                                      name, region, state (serving | degraded),
                                                           owned streams, ring, followers
    GET    /v1/namespaces/{ns}/streams                     stream names
    PUT    /v1/namespaces/{ns}/streams/{stream}            create
    GET    /v1/namespaces/{ns}/streams/{stream}            describe
    DELETE /v1/namespaces/{ns}/streams/{stream}            delete (with its ledgers)
    POST   /v1/namespaces/{ns}/streams/{stream}/records    one record: the body is the payload
    POST   /v1/namespaces/{ns}/streams/{stream}/bulk       many: a binary batch (region/bodies/batches)
    POST   /v1/namespaces/{ns}/streams/{stream}/truncate?to=DLSN
    POST   /v1/namespaces/{ns}/streams/{stream}/release    give up ownership
    GET    /v1/namespaces/{ns}/streams/{stream}/last       the last acknowledged DLSN
    POST   /v1/namespaces/{ns}/streams/{stream}/session    start a write session (fences older)
    POST   /v1/tokens, GET /v1/tokens, DELETE /v1/tokens/{id}   tokens (region/security/service.py)
Every route needs a token whose scope allows its rule (RULES) unless the deployment turned
tokens off.
Writes answer {"dlsn", "txid", "seq"} (bulk: {"records": [...]}) once acknowledged; a proxy
that does not own the stream answers 307 to the one that does (or should).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from core import runtime
from core.answers import PROXY_HEADER
from core.dlsn import DLSN
from core.errors import (
    BadRequestError,
    GlobelogError,
    OutcomeUnknownError,
    OverCapacityError,
    SeqMismatchError,
    SessionFencedError,
)
from core.parsing import bounded_int
from core.records import Record
from core.settings.limits import ProxyLimits
from global_meta.followers import Follower, FollowerStatus
from ledger import LedgerClient
from region import registry
from region.admission.listener import Listener, record_body, request_body
from region.admission.quotas import Quotas, client_of, quota_middleware
from region.bodies.batches import decode_batch
from region.drain import DrainWatch
from region.http_errors import error_middleware, json_response
from region.idempotence.producers import PRODUCER_SEQ_MAX, check_producer
from region.observability.telemetry import (
    PROXY_METRICS,
    follower_restarts,
    metrics_handler,
    metrics_middleware,
)
from region.observability.tracing import child_span, traces_handler, tracing_middleware
from region.ownership import KIND, Owned, Ownership, OwnershipConfig, Redirect
from region.security.gate import TOKEN, Rule, Rules, require_rules
from region.security.service import TOKEN_ROUTES, ProxySecurity
from writer.admin import delete_stream, describe_stream, truncate
from writer.events import Written

log = logging.getLogger(__name__)
HOPS_MAX = 2  # redirects one request may take before the proxies refuse it
OWNER_TEXT_MAX = 512  # the `unreachable_owner` parameter: name@region
RING_TIMEOUT_S = 10.0
IDLE_CHECK_S = 30.0  # how often idle owned streams are looked for (at most)
LOST_CHECK_S = 5.0  # how often owned streams writing to a lost bookie are looked for
BASE = "/v1/namespaces/{ns}/streams"
# Who may call what (docs/http-api.md, "Access"): every route has its rule.
RULES: Rules = {
    ("GET", "/v1/health"): Rule("observe", "proxy"),
    ("GET", "/metrics"): Rule("observe", "proxy"),
    ("GET", "/debug/traces"): Rule("observe", "proxy"),
    ("GET", BASE): Rule("read", "namespace"),
    ("PUT", BASE + "/{stream}"): Rule("create", "stream"),
    ("GET", BASE + "/{stream}"): Rule("read", "stream"),
    ("DELETE", BASE + "/{stream}"): Rule("delete", "stream"),
    ("POST", BASE + "/{stream}/records"): Rule("append", "stream"),
    ("POST", BASE + "/{stream}/bulk"): Rule("append", "stream"),
    ("POST", BASE + "/{stream}/truncate"): Rule("truncate", "stream"),
    ("POST", BASE + "/{stream}/release"): Rule("admin", "stream"),
    ("GET", BASE + "/{stream}/last"): Rule("read", "stream"),
    ("POST", BASE + "/{stream}/session"): Rule("append", "stream"),
    ("GET", BASE + "/{stream}/producers/{producer}"): Rule("append", "stream"),
    ("POST", BASE + "/{stream}/heartbeat"): Rule("append", "stream"),
}


class WriteProxy:
    """One write proxy process's server. `start()` binds and registers; `stop()` releases
    every owned stream (segments completed, locks released) and stops serving."""

    def __init__(
        self,
        config: OwnershipConfig,
        store: Any,
        ledgers: LedgerClient,
        limits: ProxyLimits | None = None,
        security: ProxySecurity | None = None,
        reads: Any = None,
    ) -> None:
        """`reads`: a second ZooKeeper session, for reads that may be stale (Ownership's)."""
        self.config = config
        self.limits = limits or ProxyLimits()
        self.security = security
        self.quotas = Quotas(self.limits, "append")
        self._store = store
        self._ledgers = ledgers
        self._ring = registry.Ring(
            store, KIND, config.me.region, on_failed=follower_restarts(KIND, "ring")
        )
        self.ownership = Ownership(config, store, ledgers, self._ring, self.limits, reads)
        self._drain = DrainWatch(
            store, config.me.region, on_failed=follower_restarts(KIND, "drain watch")
        )
        self._drainer = Follower(
            "drain releases", self._follow_drains, on_failed=follower_restarts(KIND, "drain")
        )
        self._idler = Follower(
            "idle releases", self._release_idle, on_failed=follower_restarts(KIND, "idle")
        )
        self._listener: Listener | None = None
        self._membership: registry.Membership | None = None
        self._inflight_bytes = 0  # over every owned stream

    # ------------------------------------------------------------------------ lifecycle

    def app(self) -> web.Application:
        issuing = self.security is not None and self.security.signing_key is not None
        rules = {**RULES, **(TOKEN_ROUTES if issuing else {})}
        gate = self.security.middlewares(rules) if self.security else []
        app = web.Application(
            client_max_size=self.limits.request_bytes_max,
            middlewares=[
                tracing_middleware(KIND),
                metrics_middleware(KIND),
                error_middleware,
                *gate,
                quota_middleware(self.quotas, _appends),
            ],
        )
        me = f"{self.config.me.name}@{self.config.me.region}"

        async def name_this_proxy(_: web.Request, response: web.StreamResponse) -> None:
            # Every answer says who gave it: a client whose later request this proxy leaves
            # unanswered (a stalled process) can then name it to another proxy as the owner
            # it cannot reach (`unreachable_owner`).
            response.headers[PROXY_HEADER] = me

        app.on_response_prepare.append(name_this_proxy)
        base = BASE
        app.router.add_get("/v1/health", self._health)
        app.router.add_get("/metrics", metrics_handler)
        app.router.add_get("/debug/traces", traces_handler)
        app.router.add_get(base, self._list)
        app.router.add_put(base + "/{stream}", self._create)
        app.router.add_get(base + "/{stream}", self._describe)
        app.router.add_delete(base + "/{stream}", self._delete)
        app.router.add_post(base + "/{stream}/records", self._write)
        app.router.add_post(base + "/{stream}/bulk", self._bulk)
        app.router.add_post(base + "/{stream}/truncate", self._truncate)
        app.router.add_post(base + "/{stream}/release", self._release)
        app.router.add_get(base + "/{stream}/last", self._last)
        app.router.add_get(base + "/{stream}/producers/{producer}", self._producer)
        app.router.add_post(base + "/{stream}/session", self._start_session)
        app.router.add_post(base + "/{stream}/heartbeat", self._heartbeat)
        if issuing:
            assert self.security is not None
            self.security.add_token_routes(app)
        require_rules(app, rules)
        return app

    async def start(self, host: str, port: int) -> None:
        if self.security:
            await self.security.start()
        self._listener = Listener(self.app(), self.limits)
        await self._listener.start(host, port, self.security.ssl if self.security else None)
        await self._ring.start(RING_TIMEOUT_S)
        await self._drain.start()
        self._drainer.start()
        self._idler.start()
        self._membership = registry.Membership(
            self._store,
            KIND,
            self.config.me,
            self.ownership.drop_all,
            on_failed=follower_restarts(KIND, "registration"),
            predecessor_wait_s=self.config.takeover_wait_s,  # a session's end, as for locks
        )
        await self._membership.start()
        log.info("write proxy %s serving at %s", self.config.me.name, self.config.me.url)

    async def _follow_drains(self, following: Callable[[], None]) -> None:
        """Releases the streams an operator drains in this region as soon as it says so
        (a restart applies the drains as they are now: one may have come meanwhile). It
        follows once a pass has released them all: a release that fails fails the loop."""
        while True:
            self._drain.changed.clear()
            self.ownership.drained = self._drain.drained
            self.ownership.region_drained = self._drain.whole_region
            await self.ownership.release_drained()
            following()
            await self._drain.changed.wait()

    async def _release_idle(self, following: Callable[[], None]) -> None:
        """Lets go of owned streams no request came for in `stream_idle_release_s`, and of
        idle ones whose open ensemble names a lost bookie."""
        following()
        loop = asyncio.get_running_loop()
        idle_every_s = min(IDLE_CHECK_S, self.limits.stream_idle_release_s / 2)
        lost_every_s = min(LOST_CHECK_S, max(0.1, self.config.lost_bookie_delay_s / 2))
        idle_at = lost_at = loop.time()
        while True:
            await asyncio.sleep(
                max(0.0, min(idle_at + idle_every_s, lost_at + lost_every_s) - loop.time())
            )
            if loop.time() >= lost_at + lost_every_s:
                lost_at = loop.time()
                await self.ownership.release_on_lost_bookies()
            if loop.time() >= idle_at + idle_every_s:
                idle_at = loop.time()
                await self.ownership.release_idle()

    def followers(self) -> list[FollowerStatus]:
        """Every background follower of this proxy, its ledger client's included."""
        own = [
            self._ring.status(),
            self._drain.status(),
            self._drainer.status(),
            self._idler.status(),
        ]
        if self._membership is not None:
            own.append(self._membership.status())
        if self.security is not None:
            own += self.security.followers()
        return own + self._ledgers.followers()

    async def stop(self) -> None:
        if self._membership is not None:
            await self._membership.stop()
        await self._drainer.stop()
        await self._idler.stop()
        await self._drain.stop()
        await self.ownership.release_all()
        await self._ring.stop()
        if self._listener is not None:
            await self._listener.stop()
        if self.security:
            await self.security.stop()

    # ---------------------------------------------------------------------- middleware

    # ------------------------------------------------------------------------ handlers

    async def _health(self, request: web.Request) -> web.Response:
        me = self.config.me
        owned = [f"{ns}/{stream}" for ns, stream in self.ownership.owned]
        ring = self._ring.names
        now_s = runtime.monotonic()
        followers = self.followers()
        state = "serving" if all(f.following for f in followers) else "degraded"
        return json_response(
            {
                "name": me.name,
                "region": me.region,
                "state": state,
                "owned": owned,
                "ring": ring,
                "followers": {f.name: f.describe(now_s) for f in followers},
            }
        )

    async def _list(self, request: web.Request) -> web.Response:
        streams = self.ownership.streams(request.match_info["ns"])
        names = await streams.list_streams()
        token = request.get(TOKEN)
        if token is not None:  # only the streams the token may read
            names = [name for name in names if token.scope.streams.matches(name)]
        return json_response({"streams": names})

    async def _create(self, request: web.Request) -> web.Response:
        streams = self.ownership.streams(request.match_info["ns"])
        await streams.create_stream(request.match_info["stream"])
        return json_response({"created": request.match_info["stream"]}, status=201)

    async def _describe(self, request: web.Request) -> web.Response:
        streams = self.ownership.streams(request.match_info["ns"])
        return json_response(await describe_stream(streams, request.match_info["stream"]))

    async def _delete(self, request: web.Request) -> web.Response:
        ns, stream = request.match_info["ns"], request.match_info["stream"]
        await self.ownership.release(ns, stream)
        ledgers = await delete_stream(self.ownership.streams(ns), self._ledgers, stream)
        return json_response({"deleted": stream, "ledgers_deleted": ledgers})

    async def _truncate(self, request: web.Request) -> web.Response:
        ns, stream = request.match_info["ns"], request.match_info["stream"]
        to = DLSN.parse(_query(request, "to"))
        result = await truncate(self.ownership.streams(ns), stream, to)
        return json_response(
            {"truncated_to": str(to), "segments_truncated": list(result.truncated)}
        )

    async def _release(self, request: web.Request) -> web.Response:
        released = await self.ownership.release(
            request.match_info["ns"], request.match_info["stream"]
        )
        return json_response({"released": released})

    async def _last(self, request: web.Request) -> web.StreamResponse:
        owned = await self._owner_of(request)
        if isinstance(owned, web.StreamResponse):
            return owned
        if "fence_session" in request.query:
            raise BadRequestError(
                "GET .../last does not start sessions (it only reads); POST .../session does"
            )
        return self._session_answer(owned)

    async def _start_session(self, request: web.Request) -> web.StreamResponse:
        """A session marker through the owner: it fences every older session."""
        owned = await self._owner_of(request)
        if isinstance(owned, web.StreamResponse):
            return owned
        owned.session = await self._append(request, owned, 0, owned.writer.mark_session)
        owned.exclusive = request.query.get("exclusive") in ("1", "true")
        return self._session_answer(owned)

    def _session_answer(self, owned: Owned) -> web.Response:
        last = owned.writer.last_written
        return json_response(
            {
                "dlsn": None if last is None else str(last.dlsn),
                "txid": owned.writer.last_txid,
                "session": owned.session,
                "exclusive": owned.exclusive,
            }
        )

    async def _producer(self, request: web.Request) -> web.StreamResponse:
        """Where an idempotent producer stands: the highest seq of it that landed (null when
        the stream does not know it). A producer that writes its seqs in order resumes after
        it: every lower seq landed."""
        owned = await self._owner_of(request)
        if isinstance(owned, web.StreamResponse):
            return owned
        producer = _int(request.match_info["producer"], "producer")
        try:
            check_producer(producer, 0)
        except ValueError as err:
            raise BadRequestError(f"{request.path}: {err}") from None
        table = await owned.idempotence.table()
        return json_response({"producer": producer, "last_seq": table.last_seq(producer)})

    async def _heartbeat(self, request: web.Request) -> web.StreamResponse:
        """A control record through the owner: proves ownership, carries the readers' LAC
        forward, and tells the client the stream's current session."""
        owned = await self._owner_of(request)
        if isinstance(owned, web.StreamResponse):
            return owned
        _check_session(request, owned)
        beat = await self._append(request, owned, 0, owned.writer.heartbeat)
        return json_response(
            {
                "heartbeat_dlsn": str(beat.dlsn),
                "session": owned.session,
                "exclusive": owned.exclusive,
            }
        )

    async def _write(self, request: web.Request) -> web.StreamResponse:
        owned = await self._owner_of(request)
        if isinstance(owned, web.StreamResponse):
            return owned
        payload = await record_body(request, self.limits)
        self._take_unsized(request, len(payload))
        txid_text = request.query.get("txid")
        txid = None if txid_text is None else _int(txid_text, "txid")
        producer = _producer(request)
        record = Record(payload, txid, producer)
        _check_session(request, owned)
        expected_text = request.query.get("expected_seq")
        if producer is not None:
            return await self._write_once(request, owned, record, producer, expected_text)
        if expected_text is None:
            written = await self._append(request, owned, len(payload), self._plain(owned, record))
            return json_response(_written(written))
        expected = _int(expected_text, "expected_seq")

        def conditional() -> Awaitable[Written]:
            return self._conditional(owned, record, expected)

        written = await self._append(request, owned, len(payload), conditional)
        return json_response(_written(written))

    async def _write_once(
        self,
        request: web.Request,
        owned: Owned,
        record: Record,
        producer: tuple[int, int],
        expected_text: str | None,
    ) -> web.Response:
        """An idempotent write: appended unless (producer, seq) already landed, in which case
        the answer is where it landed (`"duplicate": true`)."""
        size = len(record.payload)

        def start() -> Awaitable[Written]:
            if expected_text is None:
                return self._plain(owned, record)()
            return self._conditional(owned, record, _int(expected_text, "expected_seq"))

        async def write(_: list[int]) -> list[Written]:
            return [await self._append(request, owned, size, start)]

        landed, duplicates = await owned.idempotence.write_once([producer], write)
        return json_response({**_written(landed[0]), "duplicate": duplicates > 0})

    async def _bulk(self, request: web.Request) -> web.StreamResponse:
        owned = await self._owner_of(request)
        if isinstance(owned, web.StreamResponse):
            return owned
        self._check_inflight(request, owned, request.content_length or 0)
        body = await request_body(request, self.limits)
        self._take_unsized(request, len(body))
        payloads = decode_batch(body)
        _check_session(request, owned)
        producer = _producer(request)
        if producer is None:
            results = await self._append(request, owned, len(body), self._many(owned, payloads))
            return json_response({"records": [_written(w) for w in results]})
        producer_id, first = producer
        if first + len(payloads) - 1 > PRODUCER_SEQ_MAX:
            raise BadRequestError(
                f"producer_seq {first} + {len(payloads)} records passes {PRODUCER_SEQ_MAX}"
            )
        keys = [(producer_id, first + i) for i in range(len(payloads))]

        async def write(todo: list[int]) -> list[Written]:
            records = [Record(payloads[i], None, keys[i]) for i in todo]
            size = sum(len(payloads[i]) for i in todo)
            written: list[Written] = await self._append(
                request, owned, size, self._many(owned, records)
            )
            return written

        landed, duplicates = await owned.idempotence.write_once(keys, write)
        return json_response({"records": [_written(w) for w in landed], "duplicates": duplicates})

    # -------------------------------------------------------------------------- helpers

    @staticmethod
    def _plain(owned: Owned, record: Record) -> Callable[[], Awaitable[Written]]:
        def start() -> Awaitable[Written]:
            owned.writer.check_write(record)  # refused now (a failed writer, a bad txid, ...)
            return owned.writer.write(record)

        return start

    @staticmethod
    def _many(owned: Owned, records: list[Record] | list[bytes]) -> Callable[[], Awaitable[Any]]:
        def start() -> Awaitable[list[Written]]:
            owned.writer.check_batch(records)
            return owned.writer.write_bulk(records)

        return start

    def _conditional(self, owned: Owned, record: Record, expected: int) -> Awaitable[Written]:
        """A write that lands at sequence id `expected` or not at all: checked and accepted
        with no await in between, so no other write of the stream can come first."""
        writer = owned.writer
        writer.check_write(record)
        if writer.next_seq != expected:
            raise SeqMismatchError(
                f"stream {writer.stream!r}: the write expected sequence id {expected}; "
                f"the next one is {writer.next_seq}"
            )
        if not writer.has_room:
            raise OverCapacityError(
                f"stream {writer.stream!r}: {writer.pending_writes} writes pending; retry later"
            )
        return writer.write_nowait(record)

    async def _owner_of(self, request: web.Request) -> Owned | web.StreamResponse:
        """This proxy's writer of the request's stream, or a redirect to where it is."""
        ns, stream = request.match_info["ns"], request.match_info["stream"]
        hop_text = request.query.get("hop", "0")
        hop = bounded_int(hop_text, 0, HOPS_MAX)
        if hop is None:
            raise BadRequestError(
                f"hop is {hop_text[:40]!r}; expected how often the request was redirected, "
                f"0..{HOPS_MAX}"
            )
        # A client that could not reach the stream's owner names it (see Ownership.resolve).
        unreachable = request.query.get("unreachable_owner")
        if unreachable is not None and not 0 < len(unreachable) <= OWNER_TEXT_MAX:
            raise BadRequestError(
                f"unreachable_owner is {len(unreachable)} characters; expected the owner "
                f"(name@region) the client could not reach, 1..{OWNER_TEXT_MAX} characters"
            )
        owned_before = self.ownership.owned_here(ns, stream) is not None
        resolved = await self.ownership.resolve(ns, stream, hop, unreachable)
        if isinstance(resolved, Owned):
            if not owned_before:  # this request made the proxy take the stream
                cost = self.limits.stream_open_cost - 1  # the one it was let in with included
                self.quotas.take_requests(client_of(request), ns, cost)
            return resolved
        if hop >= HOPS_MAX:
            raise BadRequestError(
                f"request for {ns}/{stream} was redirected {hop} times; the proxies disagree on "
                f"its owner ({resolved.owner}); retry later"
            )
        return _redirect(request, resolved, hop + 1)

    async def _append(
        self,
        request: web.Request,
        owned: Owned,
        size: int,
        start: Callable[[], Awaitable[Any]],
    ) -> Any:
        """Starts a write (`start()`) unless the stream's bytes in flight would pass the limit;
        its result. A writer that failed on it is dropped: the next request opens another.

        What `start()` raises is a refusal: nothing was accepted, and the error is answered as
        it is (a definite failure). Once it returned, the write may have been sent to the
        bookies, so whatever fails it then is answered `outcome_unknown` (docs/http-api.md):
        a new owner's recovery may find its entry, and an idempotent retry then finds it."""
        ns, stream = request.match_info["ns"], request.match_info["stream"]
        self._check_inflight(request, owned, size)
        owned.inflight_bytes += size
        self._inflight_bytes += size
        started = time.perf_counter()
        accepting: asyncio.Future[Any] | None = None
        try:
            with child_span("globelog.commit") as span:
                accepting = asyncio.ensure_future(start())
                self._flush_soon(owned)
                result = await accepting
                if span.is_recording():
                    records = len(result) if isinstance(result, list) else 1
                    span.set_attributes({"globelog.records": records, "globelog.bytes": size})
            route = request.match_info.route.resource
            labels = {"route": route.canonical if route is not None else "?"}
            PROXY_METRICS.commit_latency.record(time.perf_counter() - started, labels)
            PROXY_METRICS.written_bytes.add(size, labels)
            PROXY_METRICS.written_records.add(
                len(result) if isinstance(result, list) else 1, labels
            )
            return result
        except (GlobelogError, TimeoutError) as err:
            if owned.writer.failed:
                log.warning("writer of %s/%s failed (%s); dropped, lock released", ns, stream, err)
                self.ownership.forget(ns, stream, owned)
            if accepting is None:
                raise
            raise OutcomeUnknownError.after(err, f"a write to {ns}/{stream}") from err
        finally:
            owned.inflight_bytes -= size
            self._inflight_bytes -= size

    def _take_unsized(self, request: web.Request, size: int) -> None:
        """A body sent without a Content-Length counts against the client's append bytes
        once read (one with it was taken as the request came in)."""
        if request.content_length is None:
            self.quotas.take_bytes(client_of(request), request.match_info["ns"], size)

    def _check_inflight(self, request: web.Request, owned: Owned, size: int) -> None:
        """OverCapacityError (nothing written) when a write of `size` bytes would pass the
        stream's or the proxy's limit of bytes accepted and not yet acknowledged."""
        ns, stream = request.match_info["ns"], request.match_info["stream"]
        limits = self.limits
        if owned.inflight_bytes + size > limits.stream_inflight_bytes_max:
            raise OverCapacityError(
                f"stream {ns}/{stream} has {owned.inflight_bytes} bytes in flight; a request of "
                f"{size} bytes would pass the limit of {limits.stream_inflight_bytes_max}; "
                "retry later"
            )
        if self._inflight_bytes + size > limits.proxy_inflight_bytes_max:
            raise OverCapacityError(
                f"this proxy has {self._inflight_bytes} bytes in flight over all its streams; a "
                f"request of {size} bytes would pass the limit of "
                f"{limits.proxy_inflight_bytes_max}; retry later"
            )

    def _flush_soon(self, owned: Owned) -> None:
        """Transmits the stream's buffer once this turn of the event loop has accepted every
        write that arrived with this one: writes that arrive together share an entry, and a
        lone write goes out at once instead of waiting for the buffer to fill or the flush
        SLA (a proxy's writes are requests waiting for their answer)."""
        if owned.flush_scheduled:
            return
        owned.flush_scheduled = True

        def flush() -> None:
            owned.flush_scheduled = False
            if not owned.writer.failed:
                with contextlib.suppress(GlobelogError):
                    owned.writer.flush()

        asyncio.get_running_loop().call_soon(flush)


def _appends(request: web.Request) -> bool:
    """Requests whose bodies count against a client's append bytes (single and bulk)."""
    return request.method == "POST" and request.path.endswith(("/records", "/bulk"))


def _check_session(request: web.Request, owned: Owned) -> None:
    """A session write (`session=ID`) is refused unless ID is the owner's current session."""
    text = request.query.get("session")
    if text is None:
        if owned.exclusive:
            raise SessionFencedError(
                f"stream {owned.writer.stream!r} is held by exclusive write session "
                f"{owned.session}: a write must carry it (or start a newer session)"
            )
        return
    session = _int(text, "session")
    if session != owned.session:
        raise SessionFencedError(
            f"stream {owned.writer.stream!r}: write session {session} was fenced; the current "
            f"session is {owned.session} (POST .../session starts a new one)"
        )


def _producer(request: web.Request) -> tuple[int, int] | None:
    """(producer id, producer seq) of an idempotent write, None for a plain one."""
    text, seq_text = request.query.get("producer"), request.query.get("producer_seq")
    if text is None and seq_text is None:
        return None
    if text is None or seq_text is None:
        raise BadRequestError(
            f"{request.path}: an idempotent write names both producer and producer_seq; got "
            f"producer={text!r}, producer_seq={seq_text!r}"
        )
    producer, seq = _int(text, "producer"), _int(seq_text, "producer_seq")
    try:
        check_producer(producer, seq)
    except ValueError as err:
        raise BadRequestError(f"{request.path}: {err}") from None
    return producer, seq


def _redirect(request: web.Request, to: Redirect, hop: int) -> web.Response:
    location = f"{to.url}{request.rel_url.with_query({**request.query, 'hop': str(hop)})}"
    body = {"code": "redirect", "owner": to.owner, "location": location}
    return web.Response(
        status=307,
        headers={"Location": location},
        body=json.dumps(body).encode(),
        content_type="application/json",
    )


def _written(written: Written) -> dict[str, Any]:
    return {"dlsn": str(written.dlsn), "txid": written.txid, "seq": written.seq}


def _query(request: web.Request, name: str) -> str:
    value = request.query.get(name)
    if value is None:
        raise BadRequestError(f"{request.path}: query parameter {name!r} is missing")
    return value


def _int(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BadRequestError(f"query parameter {name}={text!r}: expected an integer") from None
