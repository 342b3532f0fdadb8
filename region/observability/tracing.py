"""The proxies' traces (OpenTelemetry): a span per request, with child spans for the parts
that take time (taking a stream's ownership, a write's commit, a read's wait for records).

A request that carries a W3C `traceparent` header continues the caller's trace, and is
recorded when the caller sampled it; other requests are sampled at `sample_ratio`. Finished
spans go to an in-memory ring served at `GET /debug/traces` (no collector needed to look at
a slow request), and, when configured, to a file as JSON lines. Attribute names are listed in
docs/operations.md. Until a process installs tracing (`globelog serve` does), every span is
a no-op.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import IO, Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode

from core.errors import BadRequestError
from region.observability.telemetry import error_code

TRACER = trace.get_tracer("globelog.proxy")
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


def install_tracing(
    service: str, region: str, name: str, sample_ratio: float, trace_file: Path | None
) -> None:
    """Makes this process's spans record: sampled ones to /debug/traces, and to `trace_file`."""
    if not 0.0 <= sample_ratio <= 1.0:
        raise ValueError(f"trace sample ratio {sample_ratio}: expected 0..1")
    resource = Resource.create(
        {"service.name": service, "globelog.region": region, "service.instance.id": name}
    )
    provider = TracerProvider(
        resource=resource, sampler=ParentBased(TraceIdRatioBased(sample_ratio))
    )
    provider.add_span_processor(SimpleSpanProcessor(_RECENT))
    if trace_file is not None:
        provider.add_span_processor(BatchSpanProcessor(JsonLinesSpans(trace_file)))
    trace.set_tracer_provider(provider)


def tracing_middleware(kind: str) -> Middleware:
    """A server span per request, continuing the caller's trace when it sent one; the
    answer's status and globelog error code on it."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        attributes: dict[str, str | int] = {
            "http.request.method": request.method,
            "http.route": route,
            "globelog.proxy.kind": kind,
        }
        for key in ("ns", "stream"):
            if key in request.match_info:
                attributes[f"globelog.{key}"] = request.match_info[key]
        with TRACER.start_as_current_span(
            f"{request.method} {route}",
            context=propagate.extract(request.headers),
            kind=SpanKind.SERVER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
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
