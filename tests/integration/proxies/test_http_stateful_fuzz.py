"""Stateful HTTP fuzzing of real proxy processes (test_http_fuzz.py sends malformed requests
one by one; this one follows state): a Hypothesis rule-based machine sends both
proxies of a region every kind of request (create, write, bulk, read, truncate, release,
sessions, producers, delete), with malformed variants mixed in, and holds each answer to
docs/http-api.md: a documented code with its status, never `internal`, no 5xx but documented
retriable ones. A canary stream written only by well-formed writes must read back exactly.

The suite runs a modest number of examples (12 sequences of 25 steps); `GLOBELOG_FUZZ_EXAMPLES=N`
runs N sequences (150 send about 4 000 requests in two minutes)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import struct
import uuid
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from core.answers import ANSWERS
from localcluster.controller import Cluster
from localcluster.tails import proxy_url
from region.bodies.batches import CONTENT_TYPE, encode_batch
from tests.support.security import auth_headers, client_ssl_context

EXAMPLES = int(os.environ.get("GLOBELOG_FUZZ_EXAMPLES", "12"))
SENT = [0]  # requests sent (redirects followed count once)
LATE = [0]  # canary reads answered empty at first (then asked again with a long wait)
ENDED = [0]  # sequences ended with their canary read back whole
PROGRESS_EVERY = 100  # sequences between progress lines (a long run shows how far it got)
REGION = "us-east"
NAMES = ["s0", "s1", "s2"]
BAD_NAMES = ["bad name", "-x", "x" * 200, "%2e%2e", "a/b"]
TEXTS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["", "x", "1.5", "0x10", " 1", "NaN", "-0", "1e3"]),
    st.text(max_size=12),
)
PAYLOADS = st.binary(max_size=2048)


class Answer:
    def __init__(self, status: int, body: bytes, request: str) -> None:
        self.status, self.body, self.request = status, body, request

    def json(self) -> Any:
        return json.loads(self.body)


def send(
    base: str, method: str, path: str, query: dict[str, str] | None = None, **kw: Any
) -> Answer:
    """One request, following at most 3 redirects (as ProxyClient does)."""
    SENT[0] += 1
    url = base + quote(path, safe="/%") + ("?" + urlencode(query) if query else "")
    for _ in range(4):
        parts = urlsplit(url)
        connection: http.client.HTTPConnection = (
            http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=30, context=client_ssl_context()
            )
            if parts.scheme == "https"
            else http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        )
        try:
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            headers = {**auth_headers(), **kw.get("headers", {})}
            connection.request(method, target, body=kw.get("body"), headers=headers)
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        if response.status == 307:
            url = response.getheader("Location") or ""
            continue
        return Answer(response.status, body, f"{method} {url}")
    raise AssertionError(f"{method} {url}: more than 3 redirects")


class ProxyFuzz(RuleBasedStateMachine):
    write_url = ""
    read_url = ""

    def __init__(self) -> None:
        super().__init__()
        self.namespace = f"fuzz{uuid.uuid4().hex[:8]}"
        self.base = f"/v1/namespaces/{self.namespace}/streams"
        self.acked: list[bytes] = []  # the canary's acknowledged records, in order
        self.producer_seq = 0
        self.answer: Answer | None = None
        created = self.write("PUT", "/canary")
        assert created.status == 201, created.body

    def write(self, method: str, path: str, **kw: Any) -> Answer:
        self.answer = send(self.write_url, method, self.base + path, **kw)
        return self.answer

    def read(self, path: str, query: dict[str, str]) -> Answer:
        self.answer = send(self.read_url, "GET", self.base + path, query)
        return self.answer

    @invariant()
    def every_answer_is_documented(self) -> None:
        answer = self.answer
        if answer is None:
            return
        if answer.status < 300:
            answer.json()  # every success is JSON
            return
        body = answer.json()
        code = body.get("code")
        assert code in ANSWERS, f"{answer.request}: undocumented code {code!r}: {body}"
        documented = ANSWERS[code]
        assert answer.status == documented.status, (answer.request, answer.status, body)
        assert code != "internal", f"{answer.request}: {body}"
        if answer.status >= 500:
            assert documented.retriable, f"{answer.request}: a 5xx not retriable: {body}"

    # ------------------------------------------------------------------ well-formed

    @rule(payload=PAYLOADS)
    def write_canary(self, payload: bytes) -> None:
        answer = self.write("POST", "/canary/records", body=payload)
        assert answer.status == 200, answer.body
        assert answer.json()["seq"] == len(self.acked)
        self.acked.append(payload)

    @rule(payloads=st.lists(PAYLOADS, min_size=1, max_size=20), retry=st.booleans())
    def write_canary_idempotent(self, payloads: list[bytes], retry: bool) -> None:
        query = {"producer": "7", "producer_seq": str(self.producer_seq)}
        headers = {"Content-Type": CONTENT_TYPE}
        batch = encode_batch(payloads)
        for attempt in range(2 if retry else 1):
            answer = self.write("POST", "/canary/bulk", query=query, body=batch, headers=headers)
            assert answer.status == 200, answer.body
            seqs = [r["seq"] for r in answer.json()["records"]]
            assert seqs == list(range(len(self.acked), len(self.acked) + len(payloads))), (
                attempt,
                seqs,
            )
        self.acked += payloads
        self.producer_seq += len(payloads)

    @precondition(lambda self: self.acked)
    @rule(data=st.data())
    def read_canary_page(self, data: st.DataObject) -> None:
        first = data.draw(st.integers(0, len(self.acked) - 1))
        answer = self.read("/canary/records", {"from_seq": str(first), "max": "50"})
        assert answer.status == 200, answer.body
        records = self.canary_page(first, answer)
        assert records and [r["seq"] for r in records] == list(range(first, first + len(records)))

    # ------------------------------------------------------------------ anything goes

    @rule(name=st.sampled_from(NAMES + BAD_NAMES))
    def create(self, name: str) -> None:
        self.write("PUT", f"/{name}")

    @rule(name=st.sampled_from(NAMES))
    def delete(self, name: str) -> None:
        self.write("DELETE", f"/{name}")

    @rule(
        name=st.sampled_from(NAMES + BAD_NAMES),
        payload=PAYLOADS,
        params=st.dictionaries(
            st.sampled_from(["producer", "producer_seq", "session", "expected_seq", "hop"]),
            TEXTS,
            max_size=3,
        ),
    )
    def write_any(self, name: str, payload: bytes, params: dict[str, str]) -> None:
        self.write("POST", f"/{name}/records", query=params, body=payload)

    @rule(
        name=st.sampled_from(NAMES),
        body=st.one_of(
            st.lists(PAYLOADS, max_size=10).map(encode_batch),
            st.binary(max_size=64),
            st.integers(0, 2**32 - 1).map(lambda n: struct.pack(">I", n) + b"\0" * 8),
        ),
    )
    def bulk_any(self, name: str, body: bytes) -> None:
        headers = {"Content-Type": CONTENT_TYPE}
        self.write("POST", f"/{name}/bulk", body=body, headers=headers)

    @rule(
        name=st.sampled_from(["canary", *NAMES, *BAD_NAMES]),
        params=st.dictionaries(
            st.sampled_from(["from_seq", "max", "wait_ms", "from"]),
            st.one_of(TEXTS, st.sampled_from(["earliest", "dlsn:1.0.0", "txid:5", "time:0"])),
            max_size=3,
        ),
    )
    def read_any(self, name: str, params: dict[str, str]) -> None:
        params.setdefault("wait_ms", "0")
        self.read(f"/{name}/records", params)

    @rule(name=st.sampled_from(NAMES), to=st.one_of(TEXTS, st.sampled_from(["1.0.0", "0.0.0"])))
    def truncate(self, name: str, to: str) -> None:
        self.write("POST", f"/{name}/truncate", query={"to": to})

    @rule(name=st.sampled_from(["canary", *NAMES]))
    def release(self, name: str) -> None:
        self.write("POST", f"/{name}/release")

    @rule(name=st.sampled_from(NAMES))
    def last_dlsn(self, name: str) -> None:
        self.write("GET", f"/{name}/last")

    @rule(
        name=st.sampled_from(NAMES),
        params=st.dictionaries(st.sampled_from(["exclusive"]), TEXTS, max_size=1),
    )
    def start_session(self, name: str, params: dict[str, str]) -> None:
        self.write("POST", f"/{name}/session", query=params)

    @rule(name=st.sampled_from(NAMES), producer=TEXTS)
    def producer_state(self, name: str, producer: str) -> None:
        self.write("GET", f"/{name}/producers/{producer or '0'}")

    def canary_page(self, first: int, answer: Answer) -> list[dict[str, Any]]:
        """The records of a canary page asked for from `first`. An acknowledged record reaches
        the read proxy with the writer's next LAC (within the flush SLA) and its reader's long
        poll of a bookie, a new read-ahead's first record after its reader opens: on a loaded
        machine that can outlast the request's wait. It must come, though: an empty page is
        asked again, waiting 20 s (and counted)."""
        assert answer.status == 200, answer.body
        records: list[dict[str, Any]] = answer.json()["records"]
        if not records:
            LATE[0] += 1
            query = {"from_seq": str(first), "max": "50", "wait_ms": "20000"}
            answer = self.read("/canary/records", query)
            assert answer.status == 200, answer.body
            records = answer.json()["records"]
        return records

    def teardown(self) -> None:
        got: list[bytes] = []
        while len(got) < len(self.acked):
            query = {"from_seq": str(len(got)), "wait_ms": "2000"}
            records = self.canary_page(len(got), self.read("/canary/records", query))
            assert records, f"the canary stops at {len(got)} of {len(self.acked)}"
            got += [_payload(r) for r in records]
        assert got == self.acked
        ENDED[0] += 1
        if ENDED[0] % PROGRESS_EVERY == 0:
            print(
                f"stateful fuzz: {ENDED[0]} sequences ended, canary whole; {SENT[0]} requests, "
                f"every answer documented so far; {LATE[0]} late canary reads",
                flush=True,
            )


def _payload(record: dict[str, Any]) -> bytes:
    if "payload" in record:
        return str(record["payload"]).encode()
    return base64.b64decode(record["payload_b64"])


def test_the_proxies_answer_every_request_as_documented(services: Cluster) -> None:
    ProxyFuzz.write_url = proxy_url(services, REGION, "write")
    ProxyFuzz.read_url = proxy_url(services, REGION, "read")
    ProxyFuzz.TestCase.settings = settings(
        max_examples=EXAMPLES,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    ProxyFuzz.TestCase().runTest()
    print(
        f"stateful fuzz: {SENT[0]} requests in {EXAMPLES} sequences, every answer documented; "
        f"{LATE[0]} canary reads came empty within the default wait"
    )


pytestmark = pytest.mark.timeout(max(900, EXAMPLES * 3))  # about 1 s per sequence
