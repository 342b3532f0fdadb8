"""Thousands of malformed requests against a write proxy and a read proxy on the real cluster:
every answer is a documented 4xx (or a success for what happens to be valid), never a 5xx or
a dropped connection; a slow client holds no one up; afterwards the proxies still serve and a
stream written before the storm reads back unchanged."""

from __future__ import annotations

import asyncio
import random
import struct
from typing import Any

import aiohttp

from core.answers import ANSWERS
from localcluster.controller import Cluster
from region.bodies.batches import CONTENT_TYPE, encode_batch
from region.client import ProxyClient
from tests.support.proxies import read_proxy, write_proxy
from tests.support.security import client_session, raw_connection
from tests.support.streams import fresh_namespace

CASES = 2500
SEED = 20261124
DOCUMENTED = set(ANSWERS)
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
NAMES = ["s", "fuzz-1", "", "..", "a/b", "%00", "x" * 300, "ü", "-lead", "white space", "a" * 65]
SUFFIXES = ["", "/records", "/bulk", "/truncate", "/release", "/last", "/session", "/tail",
            "/nope", "/"]  # fmt: skip
JUNK = ["", "-1", "x", "1e9", "9" * 30, "0x10", "1.5", "null", "[]", "\x00", "18446744073709551616"]
PARAMS = ["txid", "expected_seq", "session", "producer", "producer_seq", "to", "hop",
          "fence_session", "from_seq", "max", "wait_ms", "from"]  # fmt: skip


def malformed_batch(rng: random.Random) -> bytes:
    good = encode_batch([b"r" * rng.randrange(0, 40) for _ in range(rng.randrange(1, 5))])
    choice = rng.randrange(6)
    if choice == 0:
        return good[: rng.randrange(len(good))]  # cut short
    if choice == 1:
        return b"GLB2" + good[4:]  # wrong magic
    if choice == 2:
        return good[:4] + struct.pack(">I", 2**31) + good[8:]  # a count far beyond the bytes
    if choice == 3:
        return good + b"trailing"
    if choice == 4:
        return good[:4] + struct.pack(">I", 0)  # no records
    return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))


def body_for(rng: random.Random) -> tuple[bytes, dict[str, str]]:
    kind = rng.randrange(4)
    if kind == 0:
        return b"", {}
    if kind == 1:
        return malformed_batch(rng), {"Content-Type": CONTENT_TYPE}
    if kind == 2:
        return b'{"bad json', {"Content-Type": "application/json"}
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))), {}


def request_for(rng: random.Random, namespace: str) -> tuple[str, str, dict[str, str], bytes, Any]:
    stream = "s" if rng.random() < 0.6 else rng.choice(NAMES)  # mostly one that exists
    ns = namespace if rng.random() < 0.85 else rng.choice(["", "ns with space", "other"])
    path = f"/v1/namespaces/{ns}/streams/{stream}{rng.choice(SUFFIXES)}"
    if rng.random() < 0.05:
        path = rng.choice(["/", "/v1", "/v2/health", "/v1/namespaces", "/v1/health/x"])
    query = {rng.choice(PARAMS): rng.choice(JUNK) for _ in range(rng.randrange(0, 3))}
    body, headers = body_for(rng)
    return rng.choice(METHODS), path, query, body, headers


async def storm(
    http: aiohttp.ClientSession, base: str, namespace: str, seed: int
) -> dict[int, int]:
    rng = random.Random(seed)
    statuses: dict[int, int] = {}
    for _ in range(CASES):
        method, path, query, body, headers = request_for(rng, namespace)
        async with http.request(
            method, base + path, params=query, data=body, headers=headers, allow_redirects=False
        ) as answer:
            if answer.status == 200 and path.endswith("/tail"):
                statuses[200] = statuses.get(200, 0) + 1
                continue  # a tail streams until the client leaves: leaving is the test
            text = await answer.read()
            statuses[answer.status] = statuses.get(answer.status, 0) + 1
            case = f"{method} {path} {query} body {body[:40]!r}: {answer.status} {text[:200]!r}"
            assert answer.status < 500, case
            if answer.status >= 400 and method != "HEAD":
                error = await answer.json(content_type=None)
                assert error["code"] in DOCUMENTED, case
                assert isinstance(error["retriable"], bool) and error["message"], case
    return statuses


async def slow_client(url: str) -> asyncio.StreamWriter:
    """Sends the head of a request announcing 1000 bytes, then 10 of them, and stalls."""
    _, writer = await raw_connection(url)
    writer.write(
        b"POST /v1/namespaces/x/streams/s/records HTTP/1.1\r\nHost: x\r\n"
        b"Content-Length: 1000\r\n\r\n0123456789"
    )
    await writer.drain()
    return writer


async def test_a_storm_of_malformed_requests_gets_documented_errors_and_harms_nothing(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        read_proxy(cluster, "us-east") as reader,
        ProxyClient([east.config.me.url], namespace=namespace) as client,
        client_session(timeout=aiohttp.ClientTimeout(total=30)) as http,
    ):
        await client.create("canary")
        await client.create("s")
        canary = [f"canary-{i}".encode() for i in range(20)]
        before = await client.write_bulk("canary", canary)
        stalled = [await slow_client(east.config.me.url) for _ in range(3)]
        write_statuses = await storm(http, east.config.me.url, namespace, SEED)
        read_statuses = await storm(http, reader.me.url, namespace, SEED + 1)
        for writer in stalled:
            writer.close()
        # both proxies still serve, and the canary reads back exactly as written
        after = await client.write("canary", b"after")
        assert after.seq == before[-1].seq + 1
        page_url = f"{reader.me.url}/v1/namespaces/{namespace}/streams/canary/records"
        records: list[dict[str, Any]] = []
        async with asyncio.timeout(30):
            while len(records) < len(canary) + 1:  # the read proxy sees the last write soon
                query = {"from_seq": str(len(records)), "max": "100", "wait_ms": "1000"}
                async with http.get(page_url, params=query) as answer:
                    records += (await answer.json())["records"]
    assert [r["payload"].encode() for r in records] == [*canary, b"after"]
    print(f"write proxy answers {sorted(write_statuses.items())}")
    print(f"read proxy answers {sorted(read_statuses.items())}")
    assert sum(write_statuses.values()) == sum(read_statuses.values()) == CASES
    assert any(s < 300 for s in write_statuses), "some generated requests are valid"
    assert len([s for s in write_statuses if s >= 400]) >= 4, "many kinds of refusal"
