"""Read proxies on the real cluster: pages by sequence id and by position, long polls, a
streamed tail, 100 concurrent readers served from one read-ahead, bad requests refused."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from core.settings.limits import ProxyLimits
from localcluster.controller import Cluster
from localcluster.probes import wait_until
from region.read_proxy import ReadProxy
from tests.support.proxies import read_proxy
from tests.support.security import client_session
from tests.support.streams import fresh_namespace, stream_env
from writer.log_writer import LogWriter

READERS_AT_TAIL_S = 30.0
MIB = 1024 * 1024


@asynccontextmanager
async def stream_s(
    cluster: Cluster, region: str, limits: ProxyLimits | None = None
) -> AsyncIterator[tuple[LogWriter, ReadProxy, aiohttp.ClientSession, str]]:
    """Stream "s" in a fresh namespace, its writer in us-east, a read proxy in `region` (in
    this process) and an HTTP session: (writer, read proxy, session, namespace)."""
    namespace = fresh_namespace()
    async with (
        stream_env(cluster, "us-east", namespace) as east,
        read_proxy(cluster, region, limits) as proxy,
        client_session() as http,
    ):
        await east.streams.create_stream("s")
        yield await east.writer("s"), proxy, http, namespace


def url(proxy: ReadProxy, namespace: str, stream: str) -> str:
    return f"{proxy.me.url}/v1/namespaces/{namespace}/streams/{stream}"


async def test_a_hundred_readers_of_one_stream_see_the_same_records_in_order(
    cluster: Cluster,
) -> None:
    count = 600
    async with stream_s(cluster, "eu-west") as (writer, west, http, namespace):
        first_half = await writer.write_bulk([f"r{i}".encode() for i in range(count // 2)])

        reached: list[int] = []  # how far each reader has read

        async def read_all() -> list[tuple[str, int, str]]:
            got: list[tuple[str, int, str]] = []
            seq = 0
            me = len(reached)
            reached.append(0)
            while len(got) < count:
                params = {"from_seq": str(seq), "max": "97", "wait_ms": "5000"}
                async with http.get(url(west, namespace, "s") + "/records", params=params) as r:
                    assert r.status == 200, await r.text()
                    page = await r.json()
                got += [(rec["dlsn"], rec["seq"], rec["payload"]) for rec in page["records"]]
                seq = reached[me] = page["next_seq"]
            return got

        readers = [asyncio.create_task(read_all()) for _ in range(100)]

        async def all_at_the_tail() -> bool:  # then they wait (long poll) for the second half
            return len(reached) == len(readers) and min(reached) == count // 2

        await wait_until("every reader at the tail", all_at_the_tail, READERS_AT_TAIL_S)
        second_half = await writer.write_bulk([f"r{i}".encode() for i in range(count // 2, count)])
        await writer.close()
        results = await asyncio.gather(*readers)
        async with http.get(f"{west.me.url}/v1/health") as r:
            health = await r.json()
    expected = [(str(w.dlsn), w.seq, f"r{w.seq}") for w in first_half + second_half]
    assert all(result == expected for result in results)
    assert health["streams"] == {f"{namespace}/s": count}, "one read-ahead for all of them"


async def test_an_idle_tail_sends_a_blank_line_each_keepalive_and_records_as_they_come(
    cluster: Cluster,
) -> None:
    limits = ProxyLimits(tail_keepalive_s=1.0)
    async with stream_s(cluster, "us-east", limits) as (writer, east, http, namespace):
        await writer.write(b"a")
        loop = asyncio.get_running_loop()
        async with http.get(url(east, namespace, "s") + "/tail", params={"from_seq": "0"}) as tail:
            assert tail.status == 200
            assert json.loads(await asyncio.wait_for(tail.content.readline(), 10))["seq"] == 0
            began = loop.time()
            assert await asyncio.wait_for(tail.content.readline(), 10) == b"\n"
            assert loop.time() - began >= 0.5, "a keepalive only once the tail was quiet"
            await writer.write(b"b")
            line = b"\n"
            while line == b"\n":  # keepalives may come before the record
                line = await asyncio.wait_for(tail.content.readline(), 10)
            assert json.loads(line)["seq"] == 1
        await writer.close()


async def test_positions_a_streamed_tail_and_bad_requests(cluster: Cluster) -> None:
    async with stream_s(cluster, "us-west") as (writer, west, http, namespace):
        written = await writer.write_bulk([b"a", b"\xff\xfe", b"c"])
        base = url(west, namespace, "s")
        async with http.get(base + "/records", params={"from": f"dlsn:{written[1].dlsn}"}) as r:
            page = await r.json()
        assert [rec["seq"] for rec in page["records"]] == [1, 2]
        assert page["records"][0]["payload_b64"] == "//4=" and page["next_seq"] == 3
        async with http.get(base + "/records", params={"from": f"txid:{written[2].txid}"}) as r:
            # one bulk write: its records share a txid, so the first of them is found
            assert [rec["seq"] for rec in (await r.json())["records"]] == [0, 1, 2]
        async with http.get(base + "/tail", params={"from_seq": "1"}) as tail:
            assert tail.status == 200
            lines = [json.loads(await tail.content.readline()) for _ in range(2)]
            await writer.write(b"d")
            lines.append(json.loads(await tail.content.readline()))
        assert [line["seq"] for line in lines] == [1, 2, 3] and lines[2]["payload"] == "d"
        await writer.close()
        for params, code in [
            ({"from": "later"}, "bad_request"),
            ({"from": "dlsn:1.x.0"}, "invalid_dlsn"),
            ({"from_seq": "-1"}, "bad_request"),
            ({"max": "0"}, "bad_request"),
            ({"wait_ms": "soon"}, "bad_request"),
        ]:
            async with http.get(base + "/records", params=params) as r:
                assert r.status == 400 and (await r.json())["code"] == code, params
        async with http.get(url(west, namespace, "missing") + "/records") as r:
            assert r.status == 404 and (await r.json())["code"] == "stream_not_found"
        async with http.post(base + "/records") as r:
            assert r.status == 405 and (await r.json())["code"] == "method_not_allowed"
        async with http.get(base + "/records", params={"from_seq": "0"}) as r:
            assert (await r.json())["records"][0]["payload"] == "a"


async def test_a_page_of_large_records_is_bounded_by_bytes(cluster: Cluster) -> None:
    """`max=10` records of almost 1 MiB each come as pages of at most `page_bytes_max` (4 MiB),
    each going on where the last stopped, whether served from the read-ahead or by a reader
    of its own (a request from before what the read-ahead holds)."""
    payloads = [bytes([65 + i]) * (MIB - 64) for i in range(10)]
    async with stream_s(cluster, "us-west") as (writer, west, http, namespace):
        for payload in payloads:
            await writer.write(payload)
        await writer.close()
        base = url(west, namespace, "s") + "/records"
        for first in (3, 0):  # the read-ahead starts at 3; a read from 0 has a reader of its own
            pages, seq = [], first
            while seq < len(payloads):
                async with http.get(base, params={"from_seq": str(seq), "max": "10"}) as r:
                    assert r.status == 200, await r.text()
                    page = await r.json()
                pages.append([rec["seq"] for rec in page["records"]])
                seq = page["next_seq"]
            sizes = [len(p) for p in pages]
            assert all(size <= 4 for size in sizes) and sum(sizes) == len(payloads) - first, pages
            assert [s for p in pages for s in p] == list(range(first, len(payloads)))


async def test_a_first_request_from_far_ahead_does_not_fix_the_read_ahead(
    cluster: Cluster,
) -> None:
    """The first request of a stream starts its read-ahead; one from far past the end used to
    leave a read-ahead that covers no record, so every later reader had a reader of its own."""
    async with stream_s(cluster, "us-west") as (writer, west, http, namespace):
        await writer.write_bulk([f"r{i}".encode() for i in range(5)])
        await writer.close()
        base = url(west, namespace, "s") + "/records"
        async with http.get(base, params={"from_seq": str(2**62), "wait_ms": "0"}) as r:
            assert r.status == 200 and (await r.json())["records"] == []
        async with http.get(base, params={"from_seq": "0"}) as r:
            assert [rec["seq"] for rec in (await r.json())["records"]] == [0, 1, 2, 3, 4]
        async with http.get(f"{west.me.url}/v1/health") as r:
            health = await r.json()
    assert health["streams"] == {f"{namespace}/s": 5}, "the read-ahead holds the stream from 0"


async def test_long_polls_and_tails_past_their_limits_are_over_capacity(cluster: Cluster) -> None:
    limits = ProxyLimits(reads_max=2, tails_max=1)
    async with stream_s(cluster, "us-west", limits) as (writer, west, http, namespace):
        await writer.write(b"r0")
        base = url(west, namespace, "s")
        polls = [
            asyncio.create_task(
                http.get(base + "/records", params={"from_seq": "1", "wait_ms": "20000"})
            )
            for _ in range(2)
        ]
        await wait_until("two long polls waiting", lambda: _reads(west, 2), 10)
        async with http.get(base + "/records", params={"from_seq": "0"}) as r:
            refused = await r.json()
        assert r.status == 429 and refused["code"] == "over_capacity", refused
        assert "pages being served" in refused["message"]
        async with http.get(base + "/tail", params={"from_seq": "0"}) as tail:
            assert tail.status == 200
            async with http.get(base + "/tail", params={"from_seq": "0"}) as second:
                assert second.status == 429 and "tails open" in (await second.json())["message"]
        await writer.write(b"r1")  # the long polls are answered; there is room again
        for answer in await asyncio.gather(*polls):
            assert answer.status == 200 and [
                r["seq"] for r in (await answer.json())["records"]
            ] == [1]
            answer.release()
        await writer.close()
        async with http.get(base + "/records", params={"from_seq": "0"}) as r:
            assert r.status == 200 and len((await r.json())["records"]) == 2


async def _reads(proxy: ReadProxy, count: int) -> bool:
    return proxy._reads.taken == count
