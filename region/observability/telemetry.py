"""The proxies' OpenTelemetry instruments, and `/metrics`, their Prometheus endpoint.

Instruments come from OpenTelemetry's global meter, so they are read nowhere until a process
installs a meter provider: `globelog serve` does (`install_prometheus`), with a Prometheus
reader whose registry `/metrics` renders (the counters, `Tally`, sum into a dict either way;
the latency histograms, `Spread`, are kept in dicts too and rendered in the same form).
Names (Prometheus form, docs/operations.md):

    globelog_proxy_requests_total{kind, route, method, status}
    globelog_proxy_request_latency_seconds{kind, route}            every request, end to end
    globelog_proxy_commit_latency_seconds{route}                   accepted -> acknowledged
    globelog_proxy_errors_total{kind, code}
    globelog_proxy_written_bytes_total / globelog_proxy_written_records_total
    globelog_proxy_ownership_changes_total{event}                  taken | released | lost | lock_broken
    globelog_proxy_delivered_records_total / _delivery_latency_seconds{region}   read proxy
    globelog_proxy_cache_reads_total{result}                       hit | miss (read proxy)
    globelog_proxy_quota_used_total{kind, unit}                    bytes | requests taken of
                                                                   clients' quotas
    globelog_proxy_quota_refused_total{kind, unit}                 requests refused by a quota
    globelog_proxy_connections_refused_total{reason}               address_rate | connections_max
    globelog_proxy_addresses_barred_total                          an address's new connections
                                                                   dropped by the kernel a moment
    globelog_proxy_follower_restarts_total{kind, follower}         a background follower failed
                                                                   and was restarted
    globelog_proxy_gc_pause_seconds{generation}                    the loop stopped for a
                                                                   garbage collection
    globelog_proxy_loop_lag_seconds                                how late a timer of the loop
                                                                   ran (every 50 ms)
    globelog_proxy_held_bytes{what}                                cache | unsent: what a read
                                                                   proxy holds (a gauge)

plus the ledger client's own (globelog_ledger_*).
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import itertools
import json
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.typedefs import Middleware
from opentelemetry import metrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from global_meta.followers import FollowerStatus

LATENCY_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
log = logging.getLogger(__name__)
GC_PAUSE_WARN_S = 0.05  # a garbage collection that stopped the loop this long is logged
LOOP_LAG_TICK_S = 0.05  # how often the loop's lag is measured
LOOP_LAG_WARN_S = 0.1  # a lag this long is logged
LOOP_LAG_WARN_EVERY_S = 1.0  # at most one such warning this often (the rest counted in it)
DELIVERY_BUCKETS_S = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


Attributes = Mapping[str, str | int]
T = TypeVar("T")


class Tally:
    """A counter summed in a dict and read by OpenTelemetry only when metrics are collected
    (an observable counter): `add` is a dict update. OpenTelemetry's own counter costs 15-30 µs
    an `add` (its measurement object, the attributes hashed, every view's aggregation under a
    lock); at several per request it was a fifth of a busy read proxy's loop. Attributes are
    given in one order at each call site (they key the dict as given), and their values are
    few (kinds, routes, codes: never a stream's or a client's name), so the dict stays small.
    Every `add` and every collection (`/metrics`, rendered on the loop) run on the event
    loop's thread; an `add` from another thread would need a lock."""

    __slots__ = ("_totals",)

    def __init__(self, meter: metrics.Meter, name: str, unit: str = "", description: str = ""):
        self._totals: dict[tuple[tuple[str, str | int], ...], float] = {}
        meter.create_observable_counter(
            name, callbacks=[self._observe], unit=unit, description=description
        )

    def add(self, amount: float, attributes: Attributes | None = None) -> None:
        key = tuple(attributes.items()) if attributes else ()
        self._totals[key] = self._totals.get(key, 0) + amount

    def total(self, attributes: Attributes | None = None) -> float:
        return self._totals.get(tuple(attributes.items()) if attributes else (), 0)

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(total, dict(key)) for key, total in list(self._totals.items())]


class Level:
    """A gauge read, when metrics are collected, from the objects that hold its value (a read
    proxy's read-aheads, its answers not yet taken): each source is an owner, held weakly
    (a proxy that is gone stops counting), a reader of its value, and attributes; the values
    of live owners are summed per attribute set. Read on the event loop's thread, as
    `Tally`."""

    __slots__ = ("_sources",)

    def __init__(self, meter: metrics.Meter, name: str, unit: str = "", description: str = ""):
        self._sources: list[tuple[weakref.ref[Any], Callable[[Any], float], Attributes]] = []
        meter.create_observable_gauge(
            name, callbacks=[self._observe], unit=unit, description=description
        )

    def follow(self, owner: T, read: Callable[[T], float], attributes: Attributes) -> None:
        self._sources.append((weakref.ref(owner), read, attributes))

    def value(self, attributes: Attributes) -> float:
        return self._summed().get(tuple(attributes.items()), 0.0)

    def _summed(self) -> dict[tuple[tuple[str, str | int], ...], float]:
        self._sources = [source for source in self._sources if source[0]() is not None]
        totals: dict[tuple[tuple[str, str | int], ...], float] = {}
        for owner_ref, read, attributes in self._sources:
            owner = owner_ref()
            if owner is not None:
                key = tuple(attributes.items())
                totals[key] = totals.get(key, 0.0) + read(owner)
        return totals

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(total, dict(key)) for key, total in self._summed().items()]


class Spread:
    """A histogram kept in a dict: per attribute set, a count per bucket (and past the last)
    and the sum; `record` is a bisect and two additions. `install_prometheus` renders every
    spread at /metrics as OpenTelemetry's Prometheus reader renders a histogram (the same
    name, labels, buckets and help; a unit test holds the two alike): OpenTelemetry has no
    observable histogram, and its own cost about 20 µs a `record` (a measurement object,
    the attributes hashed, the aggregation under a lock), one or two a request. Attributes
    are as for `Tally`: given in one order at each call site, few values. Recorded and
    collected on the event loop's thread."""

    __slots__ = ("_series", "buckets", "description", "name")

    def __init__(self, name: str, description: str, buckets: tuple[float, ...]) -> None:
        self.name = name  # Prometheus form, with its unit: globelog_proxy_..._seconds
        self.description = description
        self.buckets = buckets
        self._series: dict[tuple[tuple[str, str | int], ...], list[float]] = {}

    def record(self, value: float, attributes: Attributes | None = None) -> None:
        key = tuple(attributes.items()) if attributes else ()
        series = self._series.get(key)
        if series is None:  # a count per bucket and past the last, then the sum
            series = self._series[key] = [0.0] * (len(self.buckets) + 2)
        series[bisect.bisect_left(self.buckets, value)] += 1
        series[-1] += value

    def declare(self, attributes: Attributes) -> None:
        """Makes the series of `attributes` (empty) if there is none yet."""
        key = tuple(attributes.items())
        self._series.setdefault(key, [0.0] * (len(self.buckets) + 2))

    @property
    def recorded(self) -> bool:
        return bool(self._series)

    def family(self) -> HistogramMetricFamily:
        labels = sorted({name for key in self._series for name, _ in key} | set(SCOPE_LABELS))
        family = HistogramMetricFamily(self.name, self.description, labels=labels)
        bounds = [*(repr(float(b)) for b in self.buckets), "+Inf"]
        for key, series in list(self._series.items()):
            values = {**SCOPE_LABELS, **{name: str(value) for name, value in key}}
            cumulative = list(itertools.accumulate(series[:-1]))
            family.add_metric(
                [values.get(label, "") for label in labels],
                list(zip(bounds, cumulative, strict=True)),
                series[-1],
            )
        return family


# The labels OpenTelemetry's Prometheus reader puts on the proxies' instruments (their scope).
SCOPE_LABELS = {
    "otel_scope_name": "globelog.proxy",
    "otel_scope_schema_url": "",
    "otel_scope_version": "",
}


class _Spreads(Collector):
    """Prometheus's view of the spreads (registered once a process installs Prometheus)."""

    def __init__(self, spreads: Iterable[Spread]) -> None:
        self._spreads = list(spreads)

    def collect(self) -> Iterable[HistogramMetricFamily]:
        # as OpenTelemetry's: nothing for an instrument nothing was recorded in
        return [spread.family() for spread in self._spreads if spread.recorded]


@dataclass(frozen=True, slots=True)
class ProxyMetrics:
    requests: Tally
    unsent: Tally
    request_latency: Spread
    commit_latency: Spread
    errors: Tally
    written_bytes: Tally
    written_records: Tally
    ownership_changes: Tally
    delivered: Tally
    delivery_latency: Spread
    cache_reads: Tally
    quota_used: Tally
    quota_refused: Tally
    connections_refused: Tally
    addresses_barred: Tally
    follower_restarts: Tally
    gc_pauses: Spread
    held_bytes: Level
    loop_lag: Spread

    @classmethod
    def create(cls) -> ProxyMetrics:
        m = metrics.get_meter("globelog.proxy")

        def histogram(name: str, description: str, buckets: tuple[float, ...]) -> Spread:
            return Spread(name.replace(".", "_") + "_seconds", description, buckets)

        def tally(name: str, unit: str = "", description: str = "") -> Tally:
            return Tally(m, name, unit, description)

        return cls(
            requests=tally("globelog.proxy.requests", description="HTTP requests"),
            unsent=tally(
                "globelog.proxy.answers.unsent",
                description="answers (or a tail's lines) not delivered, counted beside their "
                "requests' status: the client took nothing for send_timeout_s (its connection "
                "closed) or went away",
            ),
            request_latency=histogram(
                "globelog.proxy.request.latency",
                "request received to answer sent",
                LATENCY_BUCKETS_S,
            ),
            commit_latency=histogram(
                "globelog.proxy.commit.latency", "write accepted to acknowledged", LATENCY_BUCKETS_S
            ),
            errors=tally("globelog.proxy.errors", description="errors by code"),
            written_bytes=tally("globelog.proxy.written.bytes", unit="By"),
            written_records=tally("globelog.proxy.written.records"),
            ownership_changes=tally(
                "globelog.proxy.ownership.changes", description="streams taken, released, lost"
            ),
            delivered=tally("globelog.proxy.delivered.records"),
            delivery_latency=histogram(
                "globelog.proxy.delivery.latency",
                "write time to served of each answer's newest record (clocks of one machine or NTP)",
                DELIVERY_BUCKETS_S,
            ),
            cache_reads=tally("globelog.proxy.cache.reads", description="hit | miss"),
            quota_used=tally(
                "globelog.proxy.quota.used", description="bytes or requests taken of quotas"
            ),
            quota_refused=tally(
                "globelog.proxy.quota.refused", description="requests refused by a quota"
            ),
            connections_refused=tally(
                "globelog.proxy.connections.refused",
                description="connections refused on accept: an address's rate, or the cap",
            ),
            addresses_barred=tally(
                "globelog.proxy.addresses.barred",
                description="addresses whose new connections the kernel dropped for a moment",
            ),
            follower_restarts=tally(
                "globelog.proxy.follower.restarts",
                description="failures of a background follower, each followed by a restart",
            ),
            gc_pauses=histogram(
                "globelog.proxy.gc.pause",
                "the cyclic garbage collector's collections, by generation (the loop stops)",
                LATENCY_BUCKETS_S,
            ),
            held_bytes=Level(
                m,
                "globelog.proxy.held.bytes",
                "By",
                "bytes a read proxy holds: its read-aheads' records (cache), answers built and "
                "not yet taken by their clients (unsent)",
            ),
            loop_lag=histogram(
                "globelog.proxy.loop.lag",
                "how late the event loop ran a timer (measured every 50 ms): the time every "
                "request waited behind other work",
                LATENCY_BUCKETS_S,
            ),
        )

    def spreads(self) -> list[Spread]:
        return [
            self.request_latency,
            self.commit_latency,
            self.delivery_latency,
            self.gc_pauses,
            self.loop_lag,
        ]


PROXY_METRICS = ProxyMetrics.create()

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def route_of(request: web.Request) -> str:
    """The route pattern a request matched ("unmatched" for none): metrics' and traces' label,
    never the path itself (which names streams)."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def metrics_middleware(kind: str) -> Middleware:
    """Counts every request by route and status, errors by code, and times each request
    (the outermost middleware: globelog's errors are answers by then)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            if status >= 400 and isinstance(response, web.Response):
                record_error(kind, error_code(response))
            return response
        finally:
            labels = {"kind": kind, "route": route_of(request)}
            PROXY_METRICS.request_latency.record(time.perf_counter() - started, labels)
            PROXY_METRICS.requests.add(1, {**labels, "method": request.method, "status": status})

    return middleware


# The globelog error code an error answer was made with (region.http_errors sets it), so the
# middlewares need not parse the body they count and trace it by.
ERROR_CODE = web.ResponseKey("globelog_error_code", str)


def error_code(response: web.StreamResponse) -> str:
    """The globelog error code of an error answer: as it was made with, else its JSON body's
    ("unknown" without one)."""
    code: str | None = response.get(ERROR_CODE)
    if code is not None:
        return code
    try:
        body = getattr(response, "body", None)
        return str(json.loads(body)["code"]) if isinstance(body, bytes) else "unknown"
    except (ValueError, KeyError, TypeError):
        return "unknown"


def follower_restarts(kind: str, follower: str) -> Callable[[FollowerStatus], None]:
    """Counts the restarts of one kind of follower ("stream cache", "registration", ...):
    the label is the kind, never a stream's name, so the series stay few."""
    labels = {"kind": kind, "follower": follower}

    def count(status: FollowerStatus) -> None:
        PROXY_METRICS.follower_restarts.add(1, labels)

    return count


def record_error(kind: str, code: str) -> None:
    PROXY_METRICS.errors.add(1, {"kind": kind, "code": code})


async def metrics_handler(request: web.Request) -> web.Response:
    """Prometheus's text format of every instrument of this process."""
    body = generate_latest(REGISTRY)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def install_prometheus(service: str, region: str, name: str) -> None:
    """Makes this process's instruments record, readable at /metrics."""
    resource = Resource.create(
        {"service.name": service, "globelog.region": region, "service.instance.id": name}
    )
    provider = MeterProvider(metric_readers=[PrometheusMetricReader()], resource=resource)
    metrics.set_meter_provider(provider)
    REGISTRY.register(_Spreads(PROXY_METRICS.spreads()))
    for generation in range(3):  # made here: a collection on another thread, while /metrics
        PROXY_METRICS.gc_pauses.declare({"generation": generation})  # is read, adds no key
    time_collections(lambda s, g: PROXY_METRICS.gc_pauses.record(s, {"generation": g}))


def time_collections(record: Callable[[float, int], None]) -> Callable[[str, dict[str, int]], None]:
    """Times each of the cyclic garbage collector's collections (the event loop stops for
    each): `record(seconds, generation)`, and a warning for one of GC_PAUSE_WARN_S or more.
    The callback is installed in `gc.callbacks` and returned (to be removed with it)."""
    began: list[float] = [0.0, 0.0]  # wall clock, the collecting thread's CPU clock

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[:] = time.perf_counter(), time.thread_time()
            return
        seconds = time.perf_counter() - began[0]
        generation = info["generation"]
        record(seconds, generation)
        if seconds >= GC_PAUSE_WARN_S:
            # Its CPU against its wall time tells a long walk from a wait for a core; what
            # it left in the generations it walked, how long a walk the next one has.
            cpu_s = time.thread_time() - began[1]
            left = sum(len(gc.get_objects(g)) for g in range(generation + 1))
            log.warning(
                "a generation-%d garbage collection stopped the loop for %.0f ms (%.0f ms of "
                "CPU; %d objects collected, %d left in the generations it walked)",
                generation, seconds * 1000, cpu_s * 1000, info["collected"], left,
            )  # fmt: skip

    gc.callbacks.append(callback)
    return callback


async def watch_loop_lag(record: Callable[[float], None]) -> None:
    """Measures, until cancelled, how late the loop runs a timer due every LOOP_LAG_TICK_S:
    `record(seconds)`, and a warning for a lag of LOOP_LAG_WARN_S or more. Every request
    waiting on the loop meanwhile waited as long (a long callback, a burst of work)."""
    loop = asyncio.get_running_loop()
    warned_at, unsaid = -LOOP_LAG_WARN_EVERY_S, 0  # at most one warning a second
    while True:
        due = loop.time() + LOOP_LAG_TICK_S
        await asyncio.sleep(LOOP_LAG_TICK_S)
        now = loop.time()
        lag = max(0.0, now - due)
        record(lag)
        if lag >= LOOP_LAG_WARN_S:
            if now - warned_at < LOOP_LAG_WARN_EVERY_S:
                unsaid += 1
                continue
            more = f" (and {unsaid} more lags since the last warning)" if unsaid else ""
            log.warning("the event loop ran %.0f ms late%s", lag * 1000, more)
            warned_at, unsaid = now, 0
