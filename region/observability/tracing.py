"""The proxies' traces (OpenTelemetry): a span per request, with child spans for the parts
that take time (taking a stream's ownership, a write's commit, a read's wait for records).

A request that carries a W3C `traceparent` header continues the caller's trace, and is
recorded when the caller sampled it; other requests are sampled at `sample_ratio`, chosen
before any span is made: one not chosen runs under a constant unsampled context (its child
spans are not recorded either) and costs no span of its own (a span that records nothing
cost a proxy about a twentieth of its loop at a request each). Finished
spans go to an in-memory ring served at `GET /debug/traces` (no collector needed to look at
a slow request), and, when configured, to a file as JSON lines. Attribute names are listed in
docs/operations.md. Until a process installs tracing (`globelog serve` does), every span is
a no-op.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import random
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from core import runtime
from core.errors import BadRequestError
from region.observability.telemetry import error_code, route_of

TRACER = trace.get_tracer("globelog.proxy")


def child_span(name: str) -> AbstractContextManager[trace.Span]:
    """A span for a part of the current request (`with child_span(...) as span`), made only
    when it would record. Under a parent that is not sampled (a request not chosen for
    tracing) the parent-based sampler would make a span that records nothing, at 10-20 us of
    the SDK's work each (a read proxy's tails and pages, one a batch); the current span is
    handed back instead, and records nothing either. Anything else (a sampled parent, or
    none: a root the sampler decides) goes to the tracer."""
    current = trace.get_current_span()
    context = current.get_span_context()
    if context.is_valid and not context.trace_flags.sampled:
        return contextlib.nullcontext(current)
    return TRACER.start_as_current_span(name)


RECENT_SPANS_MAX = 4096
LIMIT_MAX = 1000

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """One finished span as a JSON object (ids in hex, times in ns since the epoch)."""
    context = span.get_span_context()
    parent = span.parent
    start, end = span.start_time or 0, span.end_time or 0
    return {
        "name": span.name,
        "trace_id": format(context.trace_id, "032x") if context else "",
        "span_id": format(context.span_id, "016x") if context else "",
        "parent_span_id": format(parent.span_id, "016x") if parent else None,
        "kind": span.kind.name,
        "start_ns": start,
        "duration_ms": round((end - start) / 1e6, 3),
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
    }


class RecentSpans(SpanExporter):
    """The last `capacity` finished spans of this process, newest last."""

    def __init__(self, capacity: int = RECENT_SPANS_MAX) -> None:
        self._spans: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._lock = threading.Lock()  # exporters may be called from a processor's thread

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        records = [span_record(s) for s in spans]
        with self._lock:
            self._spans.extend(records)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def query(self, trace_id: str | None, min_ms: float, limit: int) -> list[dict[str, Any]]:
        """Spans of one trace (every span of it), or the newest spans at least `min_ms` long."""
        with self._lock:
            spans = list(self._spans)
        if trace_id is not None:
            return [s for s in spans if s["trace_id"] == trace_id][-limit:]
        return [s for s in spans if s["duration_ms"] >= min_ms][-limit:]


class JsonLinesSpans(SpanExporter):
    """Finished spans appended to a file, one JSON object a line."""

    def __init__(self, path: Path) -> None:
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            self._file.write(json.dumps(span_record(span), default=str) + "\n")
        self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._file.close()


_RECENT = RecentSpans()
# The context a request not chosen for tracing runs under: a remote parent that was not
# sampled, so every span started under it is a non-recording one (ParentBased).
_UNSAMPLED = trace.set_span_in_context(
    NonRecordingSpan(SpanContext(1, 1, is_remote=True, trace_flags=TraceFlags(0)))
)
# Set while the span of a request chosen for tracing starts: its root is sampled.
_CHOSEN: contextvars.ContextVar[bool] = contextvars.ContextVar("globelog_chosen", default=False)


class RequestSampling:
    """Which requests without a caller's trace are traced: `ratio` of them, chosen by the
    middleware before it makes any span (0 until `install_tracing`)."""

    def __init__(self) -> None:
        self.ratio = 0.0
        self._rng: random.Random | None = None  # made on the loop (the simulation's seed)

    def chosen(self) -> bool:
        if self.ratio <= 0.0:
            return False
        if self._rng is None:
            self._rng = runtime.new_rng()
        return self._rng.random() < self.ratio


SAMPLING = RequestSampling()


class _ChosenOrRatio(Sampler):
    """Roots of requests the middleware chose are sampled; any other root at the ratio by
    its trace id."""

    def __init__(self, ratio: float) -> None:
        self._ratio = TraceIdRatioBased(ratio)

    def should_sample(
        self,
        parent_context: otel_context.Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[trace.Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if _CHOSEN.get():
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, trace_state)
        return self._ratio.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"ChosenRequestsOr{self._ratio.get_description()}"


def install_tracing(
    service: str, region: str, name: str, sample_ratio: float, trace_file: Path | None
) -> None:
    """Makes this process's spans record: sampled ones to /debug/traces, and to `trace_file`."""
    if not 0.0 <= sample_ratio <= 1.0:
        raise ValueError(f"trace sample ratio {sample_ratio}: expected 0..1")
    resource = Resource.create(
        {"service.name": service, "globelog.region": region, "service.instance.id": name}
    )
    provider = TracerProvider(resource=resource, sampler=ParentBased(_ChosenOrRatio(sample_ratio)))
    SAMPLING.ratio = sample_ratio
    provider.add_span_processor(SimpleSpanProcessor(_RECENT))
    if trace_file is not None:
        provider.add_span_processor(BatchSpanProcessor(JsonLinesSpans(trace_file)))
    trace.set_tracer_provider(provider)


def tracing_middleware(kind: str) -> Middleware:
    """A server span per request, continuing the caller's trace when it sent one; the
    answer's status and globelog error code on it."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if "traceparent" in request.headers:  # the caller's choice (at the ratio if unreadable)
            return await traced(request, handler, propagate.extract(request.headers), False)
        if SAMPLING.chosen():
            return await traced(request, handler, otel_context.Context(), True)
        token = otel_context.attach(_UNSAMPLED)
        try:
            return await handler(request)
        finally:
            otel_context.detach(token)

    async def traced(
        request: web.Request, handler: Handler, parent: otel_context.Context, chosen: bool
    ) -> web.StreamResponse:
        """A server span under `parent`: the caller's context, or an empty one for a root this
        proxy chose to trace (`chosen`)."""
        route = route_of(request)
        attributes: dict[str, str | int] = {
            "http.request.method": request.method,
            "http.route": route,
            "globelog.proxy.kind": kind,
        }
        for key in ("ns", "stream"):
            if key in request.match_info:
                attributes[f"globelog.{key}"] = request.match_info[key]
        choice = _CHOSEN.set(chosen)
        try:
            span = TRACER.start_span(
                f"{request.method} {route}", context=parent, kind=SpanKind.SERVER,
                attributes=attributes,
            )  # fmt: skip
        finally:
            _CHOSEN.reset(choice)
        with trace.use_span(
            span, end_on_exit=True, record_exception=False, set_status_on_exception=False
        ):
            response = await handler(request)
            if span.is_recording():
                span.set_attribute("http.response.status_code", response.status)
                if response.status >= 400:
                    code = error_code(response)
                    span.set_attribute("globelog.error.code", code)
                    if response.status >= 500:
                        span.set_status(Status(StatusCode.ERROR, code))
                if response.status == 307:
                    span.set_attribute(
                        "globelog.redirect.location", response.headers.get("Location", "")
                    )
            return response

    return middleware


async def traces_handler(request: web.Request) -> web.Response:
    """GET /debug/traces[?trace_id=HEX][&min_ms=F][&limit=N]: recent sampled spans as JSON."""
    trace_id = request.query.get("trace_id")
    if trace_id is not None and (len(trace_id) != 32 or not _is_hex(trace_id)):
        raise BadRequestError(f"trace_id {trace_id!r}: expected 32 lowercase hex digits")
    min_ms = _number(request, "min_ms", 0.0, 0.0, 1e9)
    limit = int(_number(request, "limit", 100, 1, LIMIT_MAX))
    spans = _RECENT.query(trace_id, min_ms, limit)
    return web.json_response({"spans": spans})


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _number(request: web.Request, name: str, default: float, low: float, high: float) -> float:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise BadRequestError(f"{name} {text!r}: expected a number {low:g}..{high:g}")
    return value
