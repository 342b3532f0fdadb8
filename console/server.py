"""`globelog serve console --region R`: the web console's HTTP server (docs/console.md).

Routes and what each needs (`RULES`; a route without a rule stops the console at start):

    GET  /                      overview                       observe
    GET  /api/overview          its data, refreshed by the page observe
    GET  /streams[?ns&filter]   a namespace's streams          read (per namespace)
    GET  /streams/{ns}/{stream} a stream: segments, ensembles  read
    GET  /api/streams/{ns}/{stream}/records|search|export|tail read (through the read proxy)
    POST /api/streams/{ns}/{stream}/release|truncate, DELETE /api/streams/{ns}/{stream}
                                changes (through the write proxy)  admin + the change's op
    GET  /runs, /runs/{run}, /runs/{run}/timeline.png  failover runs  observe
    GET  /audit                 the audit log                  admin
    GET  /v1/health, /metrics   the console itself             observe
    GET|POST /signin, POST /signout, GET /static/{name}        anyone
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web

from console import pages
from console.access import (
    CHANGE_HEADER,
    COOKIE,
    PUBLIC,
    RAW_TOKEN_KEY,
    TOKEN_KEY,
    ConsoleAccess,
    Need,
    Rules,
    check_rules,
    covers_everything,
    is_api,
    same_site,
)
from console.overview import Overview
from console.records import (
    EXPORT_RECORDS_MAX,
    HIDDEN,
    PAGE_RECORDS_MAX,
    SEARCH_SCAN_DEFAULT,
    SEARCH_SCAN_MAX,
    ProxyAnswerError,
    ProxyRelay,
    bounded,
    position_query,
)
from console.runs import FailoverRuns
from console.streams import StreamViews
from core.answers import ANSWERS
from core.errors import BadRequestError, ForbiddenError, GlobelogError, NotFoundError
from core.security.credentials import client_ssl
from core.topology import Proxy, Topology
from global_meta import MetaStore
from global_meta.streams import StreamMetaStore
from rebuild.bookies import decommission
from region.admission.listener import Listener, body_deadline
from region.drain import set_drained
from region.http_errors import answered_code, error_response, json_response
from region.observability.telemetry import metrics_handler
from region.security.service import ProxySecurity

log = logging.getLogger(__name__)

STATIC_FILES = {"console.js": "text/javascript", "console.css": "text/css"}
SEGMENTS_SHOWN = 100  # segment rows per stream page (the timeline shows all)
LAG_SECONDS_MAX = 30  # a delivery-lag measurement tails every region for at most this
TAIL_CHECK_S = 1.0  # how often a live tail looks whether its browser is still there
WRITE_TIMEOUT_S = 30.0  # a browser that stops reading an export or a tail is let go

RULES: Rules = {
    ("GET", "/"): Need("observe"),
    ("GET", "/api/overview"): Need("observe"),
    ("GET", "/streams"): Need("read"),  # namespaces the token may not read are left out
    ("GET", "/api/streams"): Need("read"),
    ("GET", "/streams/{ns}/{stream}"): Need("read", "stream"),
    ("GET", "/api/streams/{ns}/{stream}"): Need("read", "stream"),
    ("GET", "/api/streams/{ns}/{stream}/records"): Need("read", "stream"),
    ("GET", "/api/streams/{ns}/{stream}/search"): Need("read", "stream"),
    ("GET", "/api/streams/{ns}/{stream}/export"): Need("read", "stream"),
    ("GET", "/api/streams/{ns}/{stream}/tail"): Need("read", "stream"),
    ("GET", "/api/streams/{ns}/{stream}/end"): Need("read", "stream"),
    ("GET", "/api/streams/{ns}/{stream}/audit"): Need("read", "stream"),
    ("GET", "/api/streams/{ns}/{stream}/timeline"): Need("read", "stream"),
    ("POST", "/api/streams/{ns}/{stream}/release"): Need("admin", "stream", change=True),
    ("POST", "/api/streams/{ns}/{stream}/truncate"): Need("truncate", "stream", change=True),
    ("DELETE", "/api/streams/{ns}/{stream}"): Need("delete", "stream", change=True),
    ("POST", "/api/streams/{ns}/{stream}/drain"): Need("admin", "stream", change=True),
    ("GET", "/api/streams/{ns}/{stream}/lag"): Need("read", "stream"),
    ("POST", "/api/bookies/{bookie}/decommission"): Need("admin", "cluster", change=True),
    ("GET", "/runs"): Need("observe"),
    ("GET", "/runs/{run}"): Need("observe"),
    ("GET", "/runs/{run}/timeline.png"): Need("observe"),
    ("GET", "/audit"): Need("admin", "cluster"),
    ("GET", "/v1/health"): Need("observe"),
    ("GET", "/metrics"): Need("observe"),
    ("GET", "/signin"): PUBLIC,
    ("POST", "/signin"): PUBLIC,
    ("POST", "/signout"): PUBLIC,
    ("GET", "/static/{name}"): PUBLIC,
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class ConsoleSettings:
    name: str
    region: str
    hide_payloads: frozenset[str] = frozenset()  # namespaces whose payloads are not shown
    failover_runs: Path | None = None


class Console:
    def __init__(
        self,
        topology: Topology,
        settings: ConsoleSettings,
        store: MetaStore,
        security: ProxySecurity,
        audit_log: Path,
        token: str | None,
    ) -> None:
        self.topology = topology
        self.settings = settings
        self.security = security
        self.access = ConsoleAccess(security.gate, audit_log, topology.security.tls)
        self.overview = Overview(topology, store, settings.region, token)
        self.views = StreamViews(store, topology.replication.min_regions_for_durability)
        region = topology.region(settings.region)
        self.relay = ProxyRelay(
            topology.proxy_url(region.read_proxies[0]),
            topology.proxy_url(region.write_proxies[0]),
            client_ssl(topology.security),
        )
        self.runs = FailoverRuns(settings.failover_runs)
        self._store = store

    # ------------------------------------------------------------------ app

    def app(self) -> web.Application:
        app = web.Application(
            middlewares=[self._errors, self.access.middleware(RULES)], client_max_size=64 * 1024
        )
        r = app.router
        r.add_get("/", self._overview_page)
        r.add_get("/api/overview", self._overview_api)
        r.add_get("/streams", self._streams_page)
        r.add_get("/api/streams", self._streams_api)
        r.add_get("/streams/{ns}/{stream}", self._stream_page)
        r.add_get("/api/streams/{ns}/{stream}", self._stream_api)
        r.add_get("/api/streams/{ns}/{stream}/records", self._records)
        r.add_get("/api/streams/{ns}/{stream}/search", self._search)
        r.add_get("/api/streams/{ns}/{stream}/export", self._export)
        r.add_get("/api/streams/{ns}/{stream}/tail", self._tail)
        r.add_get("/api/streams/{ns}/{stream}/end", self._end)
        r.add_get("/api/streams/{ns}/{stream}/audit", self._audit)
        r.add_get("/api/streams/{ns}/{stream}/timeline", self._timeline)
        r.add_post("/api/streams/{ns}/{stream}/release", self._through_proxy("POST", "/release"))
        r.add_post(
            "/api/streams/{ns}/{stream}/truncate", self._through_proxy("POST", "/truncate", "to")
        )
        r.add_delete("/api/streams/{ns}/{stream}", self._through_proxy("DELETE", ""))
        r.add_post("/api/streams/{ns}/{stream}/drain", self._drain)
        r.add_get("/api/streams/{ns}/{stream}/lag", self._lag)
        r.add_post("/api/bookies/{bookie}/decommission", self._decommission)
        r.add_get("/runs", self._runs_page)
        r.add_get("/runs/{run}", self._run_page)
        r.add_get("/runs/{run}/timeline.png", self._run_timeline)
        r.add_get("/audit", self._audit_page)
        r.add_get("/v1/health", self._health)
        r.add_get("/metrics", metrics_handler)
        r.add_get("/signin", self._signin_page)
        r.add_post("/signin", self._signin)
        r.add_post("/signout", self._signout)
        r.add_get("/static/{name}", self._static)
        check_rules(app, RULES)
        return app

    async def start(self) -> None:
        await self.security.start()
        await self.relay.start()
        self.overview.follower.start()

    async def stop(self) -> None:
        await self.overview.follower.stop()
        await self.overview.close()
        await self.relay.stop()
        await self.security.stop()

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """API errors as the proxies' JSON; page errors as a page saying the same."""
        try:
            return await handler(request)
        except ProxyAnswerError as answer:
            if is_api(request):
                return web.Response(
                    status=answer.status, body=answer.body, content_type="application/json"
                )
            return _page(pages.error(answer.status, "proxy", str(answer), request.get(TOKEN_KEY)),
                         answer.status)  # fmt: skip
        except GlobelogError as err:
            if is_api(request) or request.method != "GET":
                return error_response(err)
            status = ANSWERS[answered_code(err)].status
            return _page(pages.error(status, err.code, str(err), request.get(TOKEN_KEY)), status)
        except web.HTTPException:
            raise
        except Exception as err:
            log.error("%s %s failed", request.method, request.path, exc_info=err)
            if is_api(request):
                return json_response({"code": "internal", "message": repr(err)}, status=500)
            return _page(pages.error(500, "internal", repr(err), request.get(TOKEN_KEY)), 500)

    # ------------------------------------------------------------------ pages

    async def _overview_page(self, request: web.Request) -> web.Response:
        token = request[TOKEN_KEY]
        bookies = [(b.name, b.region) for b in self.topology.bookies]
        if not (token.scope.allows("admin") and covers_everything(token.scope)):
            bookies = []  # a decommission acts on every namespace's copies
        return _page(pages.overview(self.overview.snapshot, token, bookies))

    async def _overview_api(self, request: web.Request) -> web.Response:
        snapshot = self.overview.snapshot
        return json_response({**snapshot, "html": pages.overview_body(snapshot)})

    async def _streams_page(self, request: web.Request) -> web.Response:
        token = request[TOKEN_KEY]
        namespaces = await self.views.namespaces(token)
        ns = request.query.get("ns") or (namespaces[0] if namespaces else None)
        listing = None
        if ns is not None:
            listing = await self.views.list_streams(token, ns, request.query.get("filter", ""))
        return _page(pages.streams(namespaces, listing, token))

    async def _streams_api(self, request: web.Request) -> web.Response:
        token = request[TOKEN_KEY]
        ns = request.query.get("ns")
        if ns is None:
            return json_response({"namespaces": await self.views.namespaces(token)})
        listing = await self.views.list_streams(token, ns, request.query.get("filter", ""))
        return json_response(listing)

    async def _stream_page(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["stream"]
        started = time.perf_counter()
        first = bounded(request.query.get("segments_from"), "segments_from", 0, 10**9) if (
            request.query.get("segments_from") not in (None, "", "0")
        ) else 0  # fmt: skip
        view = await self.views.stream(ns, name, slice(first, first + SEGMENTS_SHOWN))
        html = pages.stream(
            view, request[TOKEN_KEY], ns in self.settings.hide_payloads,
            first, SEGMENTS_SHOWN,
        )  # fmt: skip
        answer = _page(html)
        answer.headers["Server-Timing"] = f"render;dur={(time.perf_counter() - started) * 1000:.1f}"
        return answer

    async def _stream_api(self, request: web.Request) -> web.Response:
        return json_response(
            await self.views.stream(request.match_info["ns"], request.match_info["stream"])
        )

    # ------------------------------------------------------------------ records

    def _raw_token(self, request: web.Request) -> str | None:
        """The token the gate verified for this request (None with tokens off)."""
        return request.get(RAW_TOKEN_KEY)

    def _shown(self, ns: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if ns not in self.settings.hide_payloads:
            return records
        return [
            {k: v for k, v in r.items() if k not in ("payload", "payload_b64")}
            | {"payload": HIDDEN}
            for r in records
        ]

    async def _records(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["stream"]
        query = position_query(request.query.get("from", "earliest"))
        count = bounded(request.query.get("max"), "max", 100, PAGE_RECORDS_MAX)
        started = time.perf_counter()
        page = await self.relay.page(self._raw_token(request), ns, name, query, count)
        page["records"] = self._shown(ns, page.get("records", []))
        answer = json_response(page)
        answer.headers["Server-Timing"] = f"proxy;dur={(time.perf_counter() - started) * 1000:.1f}"
        return answer

    async def _search(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["stream"]
        if ns in self.settings.hide_payloads:
            raise ForbiddenError(f"payloads of namespace {ns!r} are hidden: search is off there")
        query = position_query(request.query.get("from", "earliest"))
        scan = bounded(request.query.get("scan"), "scan", SEARCH_SCAN_DEFAULT, SEARCH_SCAN_MAX)
        found = await self.relay.search(
            self._raw_token(request), ns, name, query, request.query.get("contains", ""), scan
        )
        return json_response(found)

    async def _export(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["stream"]
        query = position_query(request.query.get("from", "earliest"))
        most = bounded(request.query.get("max"), "max", EXPORT_RECORDS_MAX, EXPORT_RECORDS_MAX)
        token = self._raw_token(request)
        records = self.relay.scan(token, ns, name, query, most)
        first = await anext(records, None)  # a refusal is still answered as an error
        answer = web.StreamResponse(
            headers={
                "Content-Type": "application/x-ndjson",
                "Content-Disposition": f'attachment; filename="{name}.jsonl"',
            }
        )
        await answer.prepare(request)
        try:
            if first is not None:
                await _send(answer, json.dumps(self._shown(ns, [first])[0]).encode() + b"\n")
                async for record in records:
                    await _send(answer, json.dumps(self._shown(ns, [record])[0]).encode() + b"\n")
        except Exception as err:  # noqa: BLE001 - the answer has begun: it can only be cut
            await _cut(request, answer, err)
            return answer
        finally:
            await records.aclose()
        await answer.write_eof()
        return answer

    async def _timeline(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["stream"]
        started = time.perf_counter()
        segments = await self.views.timeline(ns, name)
        answer = json_response({"now_ms": int(time.time() * 1000), "segments": segments})
        answer.headers["Server-Timing"] = f"render;dur={(time.perf_counter() - started) * 1000:.1f}"
        return answer

    async def _audit(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["stream"]
        return json_response(await self.views.audit(ns, name))

    async def _end(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["stream"]
        counters = await self.views.counters(ns, name)
        found = await self.relay.end(self._raw_token(request), ns, name, counters.next_seq)
        return json_response(found)

    async def _tail(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["stream"]
        raw = request.query.get("from_seq", "0")
        if not (raw.isascii() and raw.isdecimal()):
            raise BadRequestError(f"from_seq={raw!r:.40}: expected a sequence id")
        token = request[TOKEN_KEY]
        async with self.relay.tail(self._raw_token(request), ns, name, int(raw)) as upstream:
            # the proxy's refusal was answered above as an error; from here the answer streams
            answer = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
            await answer.prepare(request)

            async def pump() -> None:
                while line := await upstream.content.readline():
                    if not line.strip():  # the proxy's keepalive: passed on, for the browser's
                        await _send(answer, b"\n")
                        continue
                    record = json.loads(line)
                    shown = self._shown(ns, [record])[0] if "seq" in record else record
                    await _send(answer, json.dumps(shown).encode() + b"\n")

            # The pump waits on the proxy, this on the browser: a tail whose browser went
            # away (or whose token expired or was revoked) ends within TAIL_CHECK_S, records
            # or not.
            pumping = asyncio.ensure_future(pump())
            try:
                while not pumping.done():
                    await asyncio.wait({pumping}, timeout=TAIL_CHECK_S)
                    transport = request.transport
                    if transport is None or transport.is_closing():
                        break
                    if self.access.gate is not None:
                        self.access.gate.still_valid(token)
                if pumping.done() and not pumping.cancelled() and pumping.exception():
                    await _cut(request, answer, pumping.exception())  # type: ignore[arg-type]
                    return answer
            except GlobelogError as err:
                log.info("tail of %s/%s ended: %s", ns, name, err)
            finally:
                pumping.cancel()
                await asyncio.gather(pumping, return_exceptions=True)
        return answer

    # ------------------------------------------------------------------ changes

    def _through_proxy(self, method: str, suffix: str, *params: str) -> Handler:
        """A change the write proxy makes (`method` on the stream's path + `suffix`, with
        the request's `params`), asked with the user's own token."""

        async def change(request: web.Request) -> web.Response:
            ns, name = request.match_info["ns"], request.match_info["stream"]
            query = {p: request.query.get(p, "") for p in params}
            token = self._raw_token(request)
            return json_response(await self.relay.change(token, method, ns, name, suffix, query))

        return change

    async def _drain(self, request: web.Request) -> web.Response:
        """Stops (or, with undo=1, lets again) a region's write proxies take the stream."""
        ns, name = request.match_info["ns"], request.match_info["stream"]
        region = request.query.get("region", "")
        if region not in self.topology.region_names:
            raise BadRequestError(
                f"region={region!r:.40}: expected one of {list(self.topology.region_names)}"
            )
        undo = request.query.get("undo") in ("1", "true")
        await StreamMetaStore(self._store, ns).require(name)
        changed = await set_drained(self._store, region, ns, name, not undo)
        return json_response({"region": region, "drained": not undo, "changed": changed})

    async def _decommission(self, request: web.Request) -> web.Response:
        """Marks a bookie decommissioned (its copies are re-made elsewhere, nothing new goes
        to it), or with undo=1 takes the mark back."""
        wanted = request.match_info["bookie"]
        found = [b for b in self.topology.bookies if wanted in (b.name, b.bookie_id)]
        if not found:
            names = [b.name for b in self.topology.bookies]
            raise NotFoundError(f"no bookie {wanted!r:.80} in the topology; bookies: {names}")
        undo = request.query.get("undo") in ("1", "true")
        await decommission(self._store, found[0].bookie_id, undo=undo)
        return json_response({"bookie": found[0].name, "decommissioned": not undo})

    async def _lag(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["stream"]
        seconds = bounded(request.query.get("seconds"), "seconds", 5, LAG_SECONDS_MAX)
        token = self._raw_token(request)
        counters = await self.views.counters(ns, name)
        end = await self.relay.end(token, ns, name, counters.next_seq)
        readers = {
            r.name: self.topology.proxy_url(r.read_proxies[0])
            for r in self.topology.regions
            if r.read_proxies
        }
        found = await self.relay.delivery_lag(
            token, ns, name, int(end["next_seq"]), readers, seconds
        )
        return json_response({"from_seq": end["next_seq"], "seconds": seconds, "regions": found})

    # ------------------------------------------------------------------ runs, audit, misc

    async def _runs_page(self, request: web.Request) -> web.Response:
        configured = self.runs.folder is not None
        return _page(pages.runs(self.runs.listing(), request[TOKEN_KEY], configured))

    async def _run_page(self, request: web.Request) -> web.Response:
        return _page(pages.run(self.runs.run(request.match_info["run"]), request[TOKEN_KEY]))

    async def _run_timeline(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(self.runs.timeline(request.match_info["run"]))

    async def _audit_page(self, request: web.Request) -> web.Response:
        return _page(pages.audit(self.access.audit.newest(), request[TOKEN_KEY]))

    async def _health(self, request: web.Request) -> web.Response:
        status = self.overview.follower.status()
        return json_response(
            {
                "name": self.settings.name,
                "region": self.settings.region,
                "state": "serving",
                "overview_at_ms": self.overview.snapshot.get("at_ms"),
                "followers": {status.name: {"state": status.state.value}},
            }
        )

    async def _signin_page(self, request: web.Request) -> web.Response:
        return _page(pages.signin())

    async def _signin(self, request: web.Request) -> web.Response:
        same_site(request)
        async with body_deadline(request, self.topology.limits):
            form = await request.post()
        raw = form.get("token")
        if not isinstance(raw, str):
            return _page(pages.signin("no token given"), 400)
        try:
            token, answer = self.access.sign_in(raw)
        except GlobelogError as err:
            log.info("console sign-in refused from %s: %s", request.remote, err)
            return _page(pages.signin(f"token refused: {err}"), 401)
        log.info("console sign-in: %s (token %s) from %s", token.subject, token.token_id,
                 request.remote)  # fmt: skip
        raise answer

    async def _signout(self, request: web.Request) -> web.Response:
        same_site(request)
        answer = web.HTTPSeeOther("/signin")
        answer.del_cookie(COOKIE, path="/")
        raise answer

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        kind = STATIC_FILES.get(name)
        if kind is None:
            raise NotFoundError(f"no static file {name!r:.80}")
        body = resources.files("console").joinpath("static", name).read_bytes()
        return web.Response(body=body, content_type=kind, headers={"Cache-Control": "no-cache"})


async def _cut(request: web.Request, answer: web.StreamResponse, err: BaseException) -> None:
    """An error after a streamed answer began: one last line says what happened, and the
    connection is closed without the chunked end, so the download is seen to fail."""
    if isinstance(err, ConnectionResetError):
        return  # the browser went away
    log.info("%s %s cut short: %r", request.method, request.path, err)
    code = err.code if isinstance(err, GlobelogError) else "internal"
    line = json.dumps({"code": code, "message": str(err)[:500], "cut_short": True})
    with contextlib.suppress(Exception):
        async with asyncio.timeout(WRITE_TIMEOUT_S):
            await answer.write(line.encode() + b"\n")
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _send(answer: web.StreamResponse, data: bytes) -> None:
    """Writes to a browser, which must take it within WRITE_TIMEOUT_S (I8)."""
    async with asyncio.timeout(WRITE_TIMEOUT_S):
        await answer.write(data)


def _page(html: str, status: int = 200) -> web.Response:
    return web.Response(
        text=html,
        status=status,
        content_type="text/html",
        headers={
            # nothing from elsewhere: scripts, styles and images from the console only
            "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
            "style-src 'self'; script-src 'self'; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        },
    )


async def serve_console(
    topology: Topology,
    console: Proxy,
    settings: ConsoleSettings,
    audit_log: Path,
    session_timeout_s: float,
    stop: asyncio.Event,
    token: str | None = None,
) -> None:
    """Runs the console until `stop` is set."""
    host, port = console.endpoint.host, console.endpoint.port
    async with await MetaStore.of(
        topology, console.region, session_timeout_s=session_timeout_s
    ) as store:
        security = ProxySecurity.load(
            topology.security, store, topology.limits, issues=False, host=host
        )
        server = Console(topology, settings, store, security, audit_log, token)
        await server.start()
        # the proxies' listener: a connection cap, header and TLS handshake deadlines
        listener = Listener(server.app(), topology.limits)
        try:
            await listener.start(host, port, security.ssl)
            print(
                f"console {console.name} ({console.region}) serving at "
                f"{topology.security.scheme}://{host}:{port}",
                flush=True,
            )
            await stop.wait()
        finally:
            await listener.stop()
            await server.stop()


__all__ = ["CHANGE_HEADER", "RULES", "Console", "ConsoleSettings", "serve_console"]
