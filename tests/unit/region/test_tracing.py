"""The proxies' request spans: a request without a caller's trace is chosen for tracing at the
sample ratio before any span is made; one not chosen makes no span, and nothing under it
records either; a chosen one, and one whose caller sampled its trace, leave their spans at
/debug/traces' ring. (A tracer provider is installed once per process, so the cases share
one installation and set the ratio they need.)"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry import trace

from region.observability import tracing
from region.observability.tracing import (
    SAMPLING,
    child_span,
    install_tracing,
    tracing_middleware,
)

PATH = "/v1/namespaces/{ns}/streams/{stream}/records"
RECORDING: list[tuple[bool, bool]] = []  # per request: (its span, its child span) recording
MADE: list[bool] = []  # per request: whether its child span is a span of its own


@pytest.fixture(scope="module", autouse=True)
def installed() -> Iterator[None]:
    install_tracing("globelog-test", "us-east", "test", 0.0, None)
    yield


@pytest.fixture
async def client(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TestClient]:
    monkeypatch.setattr(SAMPLING, "ratio", 0.0)
    RECORDING.clear()
    MADE.clear()

    async def handler(request: web.Request) -> web.Response:
        parent = trace.get_current_span()
        with child_span("globelog.commit") as child:
            RECORDING.append((parent.is_recording(), child.is_recording()))
            MADE.append(child is not parent)
        return web.json_response({"ok": True})

    app = web.Application(middlewares=[tracing_middleware("write")])
    app.router.add_post(PATH, handler)
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        yield test_client


def spans_of(trace_id: str) -> list[dict[str, object]]:
    return tracing._RECENT.query(trace_id, 0.0, 100)


def newest(name: str) -> list[dict[str, object]]:
    return [s for s in tracing._RECENT.query(None, 0.0, 1000) if s["name"] == name]


async def test_a_request_not_chosen_makes_no_span_and_nothing_under_it_records(
    client: TestClient,
) -> None:
    before = len(newest("POST " + PATH))
    for _ in range(20):
        answer = await client.post("/v1/namespaces/a/streams/s/records", data=b"x")
        assert answer.status == 200
    assert len(newest("POST " + PATH)) == before
    assert RECORDING == [(False, False)] * 20
    assert MADE == [False] * 20, "no span is made under an unsampled parent"


async def test_at_ratio_one_every_request_is_traced_with_its_child_spans(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SAMPLING, "ratio", 1.0)
    answer = await client.post("/v1/namespaces/a/streams/s/records", data=b"x")
    assert answer.status == 200
    assert RECORDING == [(True, True)] and MADE == [True]
    [server] = newest("POST " + PATH)[-1:]
    assert server["kind"] == "SERVER" and server["parent_span_id"] is None
    attributes = server["attributes"]
    assert isinstance(attributes, dict)
    assert attributes["globelog.ns"] == "a" and attributes["http.response.status_code"] == 200
    [child] = [s for s in spans_of(str(server["trace_id"])) if s["name"] == "globelog.commit"]
    assert child["parent_span_id"] == server["span_id"]


async def test_about_the_ratio_of_requests_is_traced(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SAMPLING, "ratio", 0.25)
    before = len(newest("POST " + PATH))
    for _ in range(400):
        await client.post("/v1/namespaces/a/streams/s/records", data=b"x")
    traced = len(newest("POST " + PATH)) - before
    assert 50 <= traced <= 150, traced  # 100 expected; outside this about once in 10^8


async def test_a_callers_sampled_trace_is_continued_whatever_the_ratio(
    client: TestClient,
) -> None:
    trace_id, caller = os.urandom(16).hex(), os.urandom(8).hex()
    headers = {"traceparent": f"00-{trace_id}-{caller}-01"}
    answer = await client.post("/v1/namespaces/a/streams/s/records", data=b"x", headers=headers)
    assert answer.status == 200
    spans = spans_of(trace_id)
    assert {s["name"] for s in spans} == {"POST " + PATH, "globelog.commit"}
    [server] = [s for s in spans if s["kind"] == "SERVER"]
    assert server["parent_span_id"] == caller
    unsampled = {"traceparent": f"00-{os.urandom(16).hex()}-{caller}-00"}
    await client.post("/v1/namespaces/a/streams/s/records", data=b"x", headers=unsampled)
    assert RECORDING[-1] == (False, False), "the caller's choice holds"


def test_a_child_span_without_a_parent_is_a_root_the_sampler_decides() -> None:
    """Outside any request (a take begun by the proxy itself) the tracer makes the span, and
    the sampler decides it as any root (here at the installed ratio, 0: not recorded), rather
    than the shortcut for unsampled parents handing back the current span."""
    assert not trace.get_current_span().get_span_context().is_valid
    with child_span("globelog.take_ownership") as span:
        assert span.get_span_context().is_valid, "a span of its own, made by the tracer"
        assert not span.is_recording()
