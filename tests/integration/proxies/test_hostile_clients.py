"""Hostile clients against real proxies on the real cluster: each attack meets its bound (a
named limit of core/settings/limits.py, set low here) while a well-behaved client in the same test is
still served."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import aiohttp

from core.security.tokens import Scope, issue, load_signing_key
from core.settings.limits import ProxyLimits, Quota
from localcluster.controller import Cluster
from localcluster.probes import wait_until
from region.client import ProxyClient
from region.read_proxy import ReadProxy
from region.write_proxy import WriteProxy
from tests.support.proxies import read_proxy, write_proxy
from tests.support.security import SECURITY, client_session, raw_connection
from tests.support.streams import StreamEnv, fresh_namespace, stream_env

KIB = 1024
MIB = 1024 * KIB
NO_QUOTA = Quota(None, None, None, None)


def subject_token(subject: str) -> dict[str, str]:
    key = load_signing_key(SECURITY.signing_key.read_bytes(), "test key")
    raw, _ = issue(key, subject, Scope.everything(), time.time(), 600)
    return {"Authorization": f"Bearer {raw}"}


def streams_url(proxy: WriteProxy, namespace: str) -> str:
    return f"{proxy.config.me.url}/v1/namespaces/{namespace}/streams"


async def open_connections(http: aiohttp.ClientSession, proxy: WriteProxy, count: int) -> None:
    """`count` connections in the session's pool, each through its handshake: a flood sent on
    them reaches the proxy at once, not as fast as new connections are made (in this one
    process, whose loop makes both ends' handshakes)."""

    async def health() -> None:
        async with http.get(f"{proxy.config.me.url}/v1/health") as answer:
            await answer.read()

    await asyncio.gather(*(health() for _ in range(count)))


async def test_a_flooding_client_is_held_to_its_quota_and_others_are_served(
    cluster: Cluster,
) -> None:
    flooded, calm = fresh_namespace(), fresh_namespace()
    quota = Quota(append_requests_per_s=20, append_bytes_per_s=None)
    limits = ProxyLimits(quota=quota, stream_open_cost=1)  # the request rate alone
    async with (
        write_proxy(cluster, "us-east", limits) as east,
        client_session() as http,
    ):
        for namespace in (flooded, calm):
            async with http.put(f"{streams_url(east, namespace)}/s") as created:
                assert created.status == 201

        admitted_by = 0.0  # when the last write let in was answered, from the flood's start

        async def post(namespace: str, i: int) -> tuple[int, str, str | None]:
            nonlocal admitted_by
            url = f"{streams_url(east, namespace)}/s/records"
            async with http.post(url, data=f"r{i}".encode()) as answer:
                body = await answer.json()
                if answer.status == 200:
                    admitted_by = max(admitted_by, time.monotonic() - flood_start)
                return answer.status, body.get("code", ""), answer.headers.get("Retry-After")

        await open_connections(http, east, 100)  # the flood then comes in within the second
        flood_start = time.monotonic()
        answers = await asyncio.gather(*(post(flooded, i) for i in range(100)))
        refused = [a for a in answers if a[0] == 429]
        assert refused and {code for _, code, _ in refused} == {"quota_exceeded"}
        # answered after (part of) the wait: Retry-After is what remains of it
        assert {after for _, _, after in refused} <= {"0", "1"}
        # A second's worth, plus what the bucket refilled while the flood came in: every write
        # let in was let in before its answer came back.
        allowed = 20 * (1 + admitted_by)  # the quota: 20 a second
        assert 15 <= sum(a[0] == 200 for a in answers) <= allowed, (admitted_by, answers)
        # The same client in another namespace has a quota of its own.
        assert [await post(calm, i) for i in range(5)] == [(200, "", None)] * 5
        # ProxyClient waits out Retry-After: every write lands, in order, none twice.
        async with ProxyClient([east.config.me.url], flooded, deadline_s=30) as client:
            acked = [await client.write("s", f"c{i}".encode()) for i in range(30)]
        seqs = [a.seq for a in acked]
        assert seqs == list(range(seqs[0], seqs[0] + 30))


async def test_the_quota_is_the_token_subjects_wherever_its_clients_connect_from(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    quota = Quota(append_requests_per_s=20, append_bytes_per_s=None)
    limits = ProxyLimits(quota=quota, stream_open_cost=1)  # the request rate alone
    flooder, neighbour_token = subject_token("flooder"), subject_token("neighbour")
    async with (
        write_proxy(cluster, "us-east", limits) as east,
        client_session() as admin,
        client_session(flooder) as first,
        client_session(flooder) as second,  # the same subject on another connection
        client_session(neighbour_token) as other,  # another subject on the same address
    ):
        async with admin.put(f"{streams_url(east, namespace)}/s") as created:
            assert created.status == 201
        url = f"{streams_url(east, namespace)}/s/records"

        admitted_by = 0.0  # when the last flooding write let in was answered

        async def post(http: aiohttp.ClientSession, i: int) -> int:
            nonlocal admitted_by
            async with http.post(url, data=f"r{i}".encode()) as answer:
                if answer.status == 200 and http is not other:
                    admitted_by = max(admitted_by, time.monotonic() - flood_start)
                return answer.status

        async def neighbour() -> list[int]:  # writes while the flood has spent the second
            await asyncio.sleep(0.3)
            return list(await asyncio.gather(*(post(other, i) for i in range(5))))

        await asyncio.gather(open_connections(first, east, 50), open_connections(second, east, 50))
        flood_start = time.monotonic()
        neighbours, *flooded = await asyncio.gather(
            neighbour(), *(post(first, i) for i in range(50)), *(post(second, i) for i in range(50))
        )
        assert neighbours == [200] * 5, "a budget of its own"
        # a second's worth, plus the refill while the flood came in (see the test above)
        allowed = 20 * (1 + admitted_by)  # the quota: 20 a second
        assert 15 <= flooded.count(200) <= allowed, ("one budget for both", admitted_by, flooded)
        assert flooded.count(429) == 100 - flooded.count(200)


async def test_requests_that_make_the_proxy_take_streams_cost_more(cluster: Cluster) -> None:
    """Taking a stream (its lock, recovery, a new ledger) costs `stream_open_cost` requests: a
    client writing to many streams it does not own is held back sooner than one writing on to
    a stream the proxy owns."""
    namespace = fresh_namespace()
    quota = Quota(append_requests_per_s=40, append_bytes_per_s=None)
    limits = ProxyLimits(quota=quota)  # stream_open_cost: 20, the default
    async with (
        write_proxy(cluster, "us-east", limits) as east,
        client_session(subject_token("admin")) as admin,
        client_session(subject_token("spreader")) as spreader,
        client_session(subject_token("steady")) as steady,
    ):
        url = streams_url(east, namespace)
        for i in range(9):
            async with admin.put(f"{url}/s{i}") as created:
                assert created.status == 201

        async def post(http: aiohttp.ClientSession, name: str) -> int:
            async with http.post(f"{url}/{name}/records", data=b"r") as answer:
                return answer.status

        # 8 let in at once (40 a second), then 8 x 20 taken as they end: 128 into debt
        taken = await asyncio.gather(*(post(spreader, f"s{i}") for i in range(1, 9)))
        assert taken.count(200) >= 1 and taken.count(429) == 8 - taken.count(200)
        assert await post(spreader, "s1") == 429, "a stream the proxy owns: still in debt"
        # one take (20), then writes to the stream it owns (1 each): within 40 a second
        assert [await post(steady, "s0") for _ in range(15)] == [200] * 15


async def test_slow_clients_fill_the_connections_and_the_one_served_goes_on(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    limits = ProxyLimits(connections_max=12, idle_timeout_s=1.5, quota=NO_QUOTA)
    async with (
        write_proxy(cluster, "us-east", limits) as east,
        client_session() as http,
    ):
        url = f"{streams_url(east, namespace)}/s"
        async with http.put(url) as created:  # the well-behaved client's pooled connection
            assert created.status == 201
        slow = []
        for _ in range(11):  # the rest of the connections, each sending headers forever
            reader, writer = await raw_connection(east.config.me.url)
            writer.write(b"POST /v1/health HTTP/1.1\r\nHost: x\r\n")
            slow.append((reader, writer))
        await asyncio.sleep(0.1)
        health = f"{east.config.me.url}/v1/health"
        async with (
            client_session() as newcomer,
            newcomer.get(health) as answer,
        ):
            refused = await answer.json()
            assert answer.status == 429 and refused["code"] == "over_capacity", refused
        for i in range(5):  # the pooled connection is served meanwhile
            async with http.post(f"{url}/records", data=f"r{i}".encode()) as answer:
                assert answer.status == 200, await answer.text()
        # The slow ones are cut at the idle deadline; a newcomer is served again.
        for reader, _ in slow:
            assert await asyncio.wait_for(reader.read(), 10) == b""
        async with (
            client_session() as newcomer,
            newcomer.get(health) as answer,
        ):
            assert answer.status == 200
        for _, writer in slow:
            writer.close()


async def test_read_aheads_are_bounded_in_number_bytes_and_idle_time(cluster: Cluster) -> None:
    namespace = fresh_namespace()
    limits = ProxyLimits(
        cache_streams_max=3,
        cache_stream_bytes_max=128 * KIB,
        cache_bytes_max=256 * KIB,
        cache_idle_s=1.0,
        quota=NO_QUOTA,
    )
    names = [f"s{i}" for i in range(5)]
    payloads = {
        name: [f"{name}-{i}-".encode() + b"x" * 8 * KIB for i in range(40)] for name in names
    }
    async with (
        stream_env(cluster, "us-east", namespace) as env,
        read_proxy(cluster, "eu-west", limits) as west,
        client_session() as http,
    ):
        await write_streams(env, payloads)
        for name in names:  # every stream read whole, through its read-ahead and around it
            assert await read_all(http, west, namespace, name) == payloads[name]
            health = await health_of(http, west)
            assert health["streams_count"] <= 3 and health["cache_bytes"] <= 256 * KIB, health
        assert len(west._caches) <= 3 and west._budget.used <= 256 * KIB
        await wait_until("idle read-aheads closed", lambda: no_caches(west), 10)


async def test_an_idle_read_ahead_stops_following_and_the_next_read_resumes_it(
    cluster: Cluster,
) -> None:
    """A read-ahead no request read for `cache_follow_idle_s` closes its reader (no polls of
    an idle stream) and keeps its records; the proxy stays healthy, and the next read gets
    what was written meanwhile, the read-ahead following again."""
    namespace = fresh_namespace()
    limits = ProxyLimits(cache_follow_idle_s=1.0, quota=NO_QUOTA)
    async with (
        stream_env(cluster, "us-east", namespace) as env,
        read_proxy(cluster, "eu-west", limits) as west,
        client_session() as http,
    ):
        await env.streams.create_stream("s")
        writer = await env.writer("s")
        first = [f"s-{i}".encode() for i in range(40)]
        await writer.write_bulk(first)
        assert await read_all(http, west, namespace, "s") == first
        cache = west._caches[(namespace, "s")]

        async def paused() -> bool:
            return cache.paused

        await wait_until("the idle read-ahead paused", paused, 10)
        assert cache._reading is None and cache.covers(0)
        health = await health_of(http, west)
        assert health["state"] == "serving" and health["streams_paused"] == 1, health
        await writer.write_bulk([b"after-0", b"after-1"])
        url = f"{west.me.url}/v1/namespaces/{namespace}/streams/s/records"
        async with http.get(url, params={"from_seq": "0", "max": "100"}) as answer:
            page = await answer.json()
        assert [r["payload"].encode() for r in page["records"]][:40] == first, "kept"
        got = [r["payload"] for r in page["records"]][40:]
        seq = page["next_seq"]
        while len(got) < 2:  # the resumed read-ahead brings what came while it was paused
            async with http.get(url, params={"from_seq": str(seq), "wait_ms": "5000"}) as answer:
                page = await answer.json()
            got += [r["payload"] for r in page["records"]]
            seq = page["next_seq"]
        assert got == ["after-0", "after-1"]
        assert west._caches[(namespace, "s")] is cache and not cache.paused
        await writer.close()


async def test_past_the_cap_on_following_read_aheads_the_least_recently_read_pause(
    cluster: Cluster,
) -> None:
    """A client that reads many streams once leaves at most `cache_following_max` read-aheads
    following (each polls its bookies): the least recently read pause first, and one read
    again follows again."""
    namespace = fresh_namespace()
    limits = ProxyLimits(cache_following_max=2, quota=NO_QUOTA)
    names = [f"s{i}" for i in range(4)]
    async with (
        stream_env(cluster, "us-east", namespace) as env,
        read_proxy(cluster, "eu-west", limits) as west,
        client_session() as http,
    ):
        await write_streams(
            env, {name: [f"{name}-{i}".encode() for i in range(40)] for name in names}
        )
        for name in names:
            assert len(await read_all(http, west, namespace, name)) == 40

        def paused() -> list[str]:
            return [s for (_, s), c in west._caches.items() if c.paused]

        async def capped() -> bool:
            return len(paused()) >= 2

        await wait_until("read-aheads past the cap paused", capped, 15)
        assert sorted(paused()) == ["s0", "s1"], "the least recently read"
        assert await read_all(http, west, namespace, "s0") == [
            f"s0-{i}".encode() for i in range(40)
        ]
        assert not west._caches[(namespace, "s0")].paused


async def test_owned_streams_are_capped_and_idle_ones_let_go(cluster: Cluster) -> None:
    namespace = fresh_namespace()
    limits = ProxyLimits(owned_streams_max=3, stream_idle_release_s=1.0, quota=NO_QUOTA)
    async with (
        write_proxy(cluster, "us-east", limits) as east,
        client_session() as http,
    ):
        url = streams_url(east, namespace)
        for name in ("s0", "s1", "s2", "s3"):
            async with http.put(f"{url}/{name}") as created:
                assert created.status == 201
        for name in ("s0", "s1", "s2"):
            async with http.post(f"{url}/{name}/records", data=b"first") as answer:
                assert answer.status == 200
        async with http.post(f"{url}/s3/records", data=b"first") as answer:
            refused = await answer.json()
            assert answer.status == 429 and refused["code"] == "over_capacity", refused
            assert "owned_streams_max" in refused["message"]
        await wait_until("idle streams let go", lambda: owns_nothing(east), 10)
        for name in ("s3", "s0"):  # taken again on their next write, the stream goes on
            async with http.post(f"{url}/{name}/records", data=b"second") as answer:
                assert answer.status == 200, await answer.text()
                assert (await answer.json())["seq"] == (0 if name == "s3" else 1)


async def test_a_client_naming_producers_without_end_costs_only_its_own_stream(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    limits = ProxyLimits(producer_acks_max=200, quota=NO_QUOTA)
    async with (
        write_proxy(cluster, "us-east", limits) as east,
        ProxyClient([east.config.me.url], namespace) as client,
    ):
        await client.create("calm")
        await client.create("noisy")
        calm = [await client.write("calm", b"c", producer=(7, seq)) for seq in range(50)]
        for producer in range(600):  # 600 producers of one write each
            await client.write("noisy", b"n", producer=(1000 + producer, 0))
        assert east.ownership.producer_budget.used <= 200
        for seq in (0, 25, 49):  # the calm stream's producer is still known
            again = await client.write("calm", b"c", producer=(7, seq))
            assert again.duplicate and again.seq == calm[seq].seq


async def test_requests_that_open_readers_cost_more_of_the_read_quota(cluster: Cluster) -> None:
    """A client opening read-aheads of many streams (each a ZooKeeper walk and bookie round
    trips) pays `reader_open_cost` requests for each; one reading a stream it already has a
    read-ahead for pays one."""
    namespace = fresh_namespace()
    quota = Quota(None, None, read_bytes_per_s=None, read_requests_per_s=20)
    limits = ProxyLimits(quota=quota, reader_open_cost=10)
    names = [f"s{i}" for i in range(8)]
    async with (
        stream_env(cluster, "us-east", namespace) as env,
        read_proxy(cluster, "eu-west", limits) as west,
        client_session(subject_token("spreader")) as spreader,
        client_session(subject_token("steady")) as steady,
    ):
        for name in names:
            await env.streams.create_stream(name)
            writer = await env.writer(name)
            await writer.write(f"{name}-0".encode())
            await writer.close()
        base = f"{west.me.url}/v1/namespaces/{namespace}/streams"

        async def read(http: aiohttp.ClientSession, name: str) -> int:
            params = {"from_seq": "0", "wait_ms": "0"}
            async with http.get(f"{base}/{name}/records", params=params) as answer:
                return answer.status

        # 20 requests a second: two or three read-aheads (at one request each, all 7 fit)
        opened = await asyncio.gather(*(read(spreader, name) for name in names[1:]))
        assert 1 <= opened.count(200) <= 3 and opened.count(429) == 7 - opened.count(200)
        # one read-ahead opened (10), then pages from it (1 each): within 20 a second
        assert [await read(steady, "s0") for _ in range(8)] == [200] * 8


async def test_a_reads_bytes_are_those_of_its_answer(cluster: Cluster) -> None:
    """Small records cost what encoding and sending them costs: a page of 300 records of 10
    bytes (3 KB of payloads, about 40 KB of JSON) takes the answer's bytes of the read quota,
    so a client with 20 KB a second is in debt after it and its next read is refused, while
    a page of 10 records (about 1.4 KB) leaves a second client room for more."""
    namespace = fresh_namespace()
    quota = Quota(None, None, read_bytes_per_s=20 * KIB, read_requests_per_s=None)
    async with (
        stream_env(cluster, "us-east", namespace) as env,
        read_proxy(cluster, "us-east", ProxyLimits(quota=quota)) as east,
        client_session(subject_token("wide")) as wide,
        client_session(subject_token("narrow")) as narrow,
    ):
        await env.streams.create_stream("small")
        writer = await env.writer("small")
        await writer.write_bulk([b"%010d" % i for i in range(300)])
        await writer.close()
        url = f"{east.me.url}/v1/namespaces/{namespace}/streams/small/records"

        async def page(http: aiohttp.ClientSession, most: int) -> tuple[int, int]:
            params = {"from_seq": "0", "max": str(most), "wait_ms": "0"}
            async with http.get(url, params=params) as answer:
                return answer.status, len(await answer.read())

        status, size = await page(wide, 300)
        assert status == 200 and size > 30 * KIB, size
        assert (await page(wide, 1))[0] == 429
        answers = [await page(narrow, 10) for _ in range(5)]
        assert [status for status, _ in answers] == [200] * 5
        assert sum(size for _, size in answers) < 20 * KIB


async def test_a_client_past_its_read_quota_gets_nothing_more_on_its_open_tails(
    cluster: Cluster,
) -> None:
    """Tails opened while a client was within its read quota stay open once it is in debt,
    but send nothing until the debt is paid: the first batch of new records goes on one of
    them, and puts it in debt (each tail sent a page, whatever the debt, before the quota was
    checked per batch); another client's tail of the same stream is served at once."""
    namespace = fresh_namespace()
    quota = Quota(None, None, read_bytes_per_s=10 * KIB, read_requests_per_s=None)
    async with (
        stream_env(cluster, "us-east", namespace) as env,
        read_proxy(cluster, "us-east", ProxyLimits(quota=quota)) as east,
        client_session(subject_token("greedy")) as greedy,
        client_session(subject_token("other")) as other,
        contextlib.AsyncExitStack() as tails,
    ):
        await env.streams.create_stream("s")
        writer = await env.writer("s")
        tails.push_async_callback(writer.close)
        await writer.write(b"first")
        url = f"{east.me.url}/v1/namespaces/{namespace}/streams/s/tail"
        opened = [  # a small first record each: within the quota, every tail is let in
            await tails.enter_async_context(greedy.get(url, params={"from_seq": "0"}))
            for _ in range(3)
        ]
        assert [t.status for t in opened] == [200] * 3
        for tail in opened:
            assert b'"seq": 0' in await asyncio.wait_for(tail.content.readline(), 10)

        async def within(tail: aiohttp.ClientResponse, seconds: float) -> bytes:
            got = b""
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    while piece := await tail.content.readany():
                        got += piece
            return got

        # One tail sends a batch of these (tens of KiB: seconds of the quota), and the client
        # owes: its other tails send nothing (the quota is checked before every batch).
        await writer.write_bulk([b"a" * KIB for _ in range(100)])
        first = await asyncio.gather(*(within(t, 2.0) for t in opened))
        assert sorted(b'"seq": 1,' in got for got in first) == [False, False, True], [
            len(got) for got in first
        ]
        await writer.write_bulk([b"b" * KIB for _ in range(100)])
        async with other.get(url, params={"from_seq": "101"}) as theirs:
            line = await asyncio.wait_for(theirs.content.readline(), 10)
            assert b'"seq": 101' in line, line[:100]
        for got in await asyncio.gather(*(within(t, 2.0) for t in opened)):
            assert b'"seq": 101' not in got, "nothing past the batch that put it in debt"
        assert east.quotas.wait_s("subject greedy", namespace) > 0


async def test_a_tail_catching_up_slows_down_to_its_quota_batch_by_batch(cluster: Cluster) -> None:
    """A tail that asks for records already written gets them a batch (500 records at most)
    at a time, its client's read quota checked before each: a client in debt after one batch
    gets no more until it is paid (the whole page went out on a quota checked once, before)."""
    namespace = fresh_namespace()
    quota = Quota(None, None, read_bytes_per_s=50 * KIB, read_requests_per_s=None)
    async with (
        stream_env(cluster, "us-east", namespace) as env,
        read_proxy(cluster, "us-east", ProxyLimits(quota=quota)) as east,
        client_session(subject_token("catching-up")) as http,
    ):
        await env.streams.create_stream("s")
        writer = await env.writer("s")
        for _ in range(3):
            await writer.write_bulk([b"c" * KIB for _ in range(500)])
        await writer.close()
        url = f"{east.me.url}/v1/namespaces/{namespace}/streams/s/tail"
        async with http.get(url, params={"from_seq": "0"}) as tail:
            assert tail.status == 200
            seqs: list[int] = []
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(3):
                    while line := await tail.content.readline():
                        if line.strip():
                            seqs.append(json.loads(line)["seq"])
        assert seqs[:1] == [0] and seqs == list(range(len(seqs)))
        assert len(seqs) <= 500, f"{len(seqs)} records: past one batch while in debt"
        assert east.quotas.wait_s("subject catching-up", namespace) > 0


async def test_one_clients_tails_and_long_polls_leave_the_others_theirs(cluster: Cluster) -> None:
    """Past its share of a read proxy's tails (`tails_per_client_max`) and pages
    (`reads_per_client_max`, long polls included), a client is answered quota_exceeded, while
    another client of the same proxy still opens a tail and a long poll."""
    namespace = fresh_namespace()
    limits = ProxyLimits(quota=NO_QUOTA, tails_per_client_max=2, reads_per_client_max=2)
    async with (
        stream_env(cluster, "us-east", namespace) as env,
        read_proxy(cluster, "us-east", limits) as east,
        client_session(subject_token("hog")) as hog,
        client_session(subject_token("fair")) as fair,
    ):
        await env.streams.create_stream("s")
        writer = await env.writer("s")
        await writer.write(b"r0")
        base = f"{east.me.url}/v1/namespaces/{namespace}/streams/s"
        poll = {"from_seq": "1", "wait_ms": "20000"}
        tails = [await hog.get(f"{base}/tail", params={"from_seq": "0"}) for _ in range(2)]
        polls = [asyncio.create_task(hog.get(f"{base}/records", params=poll)) for _ in range(2)]
        await wait_until("the hog's two long polls", lambda: _long_polls(east, 2), 10)
        async with hog.get(f"{base}/tail", params={"from_seq": "0"}) as third:
            refused = await third.json()
            assert third.status == 429 and refused["code"] == "quota_exceeded", refused
            assert "2 streamed tails open" in refused["message"]
        async with hog.get(f"{base}/records", params=poll) as third:
            refused = await third.json()
            assert third.status == 429 and refused["code"] == "quota_exceeded", refused
        async with fair.get(f"{base}/tail", params={"from_seq": "0"}) as tail:
            assert tail.status == 200
            assert json.loads(await tail.content.readline())["payload"] == "r0"
        fair_poll = asyncio.create_task(fair.get(f"{base}/records", params=poll))
        await wait_until("the fair client's long poll too", lambda: _long_polls(east, 3), 10)
        await writer.write(b"r1")  # every long poll is answered
        for answer in await asyncio.gather(*polls, fair_poll):
            assert answer.status == 200, await answer.text()
            assert [r["seq"] for r in (await answer.json())["records"]] == [1]
            answer.release()
        for tail in tails:
            assert tail.status == 200
            tail.release()
        await writer.close()


async def test_a_client_that_reads_nothing_holds_at_most_its_share_of_unsent_pages(
    cluster: Cluster,
) -> None:
    """A client that asks for wide pages and reads none of them holds one page at most past
    its share (`client_send_bytes_max`): its other pages are refused quota_exceeded (once
    built; before they are read once it holds its share), another client is served, and
    the page it holds is let go when `send_timeout_s` closes its connection."""
    namespace = fresh_namespace()
    limits = ProxyLimits(
        quota=NO_QUOTA, page_bytes_max=16 * MIB, client_send_bytes_max=8 * MIB, send_timeout_s=4
    )
    payloads = [bytes([i]) + b"\xff" * (MIB - 64) for i in range(16)]  # base64: 21 MB a page
    async with (
        stream_env(cluster, "us-east", namespace) as env,
        read_proxy(cluster, "us-east", limits) as east,
        client_session(subject_token("fair")) as fair,
    ):
        await env.streams.create_stream("s")
        writer = await env.writer("s")
        await writer.write_bulk(payloads)
        await writer.close()
        path = f"/v1/namespaces/{namespace}/streams/s/records?from_seq=0&max=100"
        hog = subject_token("hog")["Authorization"]
        request = f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {hog}\r\n\r\n".encode()
        connections = [await raw_connection(east.me.url) for _ in range(3)]
        async with contextlib.AsyncExitStack() as closing:
            for _, conn in connections:
                closing.callback(conn.close)
                conn.write(request)  # and then read nothing of the page
            answers = await asyncio.gather(*(_head_of(reader) for reader, _ in connections))
            assert sorted(status for status, _ in answers) == [200, 429, 429], answers
            for status, body in answers:
                if status == 429:
                    assert json.loads(body)["code"] == "quota_exceeded", body
            held = east._unsent.by_client["subject hog"]
            assert held > limits.client_send_bytes_max, "one page, whatever its size"
            assert east._unsent.used == held
            reader, conn = await raw_connection(east.me.url)  # holding its share already
            closing.callback(conn.close)
            conn.write(request)
            status, body = await _head_of(reader)
            assert status == 429 and "bytes of answers not yet taken" in body, body
            assert east._unsent.by_client["subject hog"] == held
            async with fair.get(f"{east.me.url}{path}") as answer:
                assert answer.status == 200, await answer.text()
                assert len((await answer.json())["records"]) == 16
            await wait_until(
                "the page nobody took let go at the send deadline",
                lambda: _nothing_unsent(east),
                limits.send_timeout_s + 10,
            )


async def _head_of(reader: asyncio.StreamReader) -> tuple[int, str]:
    """An answer's status and, unless it is a 200 (a page nobody will read), its body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    status = int(head.split(b" ", 2)[1])
    if status == 200:
        return status, ""
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return status, (await asyncio.wait_for(reader.readexactly(length), 30)).decode()


async def _nothing_unsent(proxy: ReadProxy) -> bool:
    return proxy._unsent.used == 0 and not proxy._unsent.by_client


async def _long_polls(proxy: ReadProxy, count: int) -> bool:
    return proxy._reads.taken == count


async def read_all(
    http: aiohttp.ClientSession, proxy: ReadProxy, namespace: str, stream: str
) -> list[bytes]:
    url = f"{proxy.me.url}/v1/namespaces/{namespace}/streams/{stream}/records"
    got: list[bytes] = []
    seq = 0
    while len(got) < 40:
        async with http.get(url, params={"from_seq": str(seq), "max": "7"}) as answer:
            assert answer.status == 200, await answer.text()
            page = await answer.json()
        got += [r["payload"].encode() for r in page["records"]]
        seq = page["next_seq"]
    return got


async def write_streams(env: StreamEnv, payloads: dict[str, list[bytes]]) -> None:
    """Each stream made and written whole (a writer of its own, closed after)."""
    for name, records in payloads.items():
        await env.streams.create_stream(name)
        writer = await env.writer(name)
        await writer.write_bulk(records)
        await writer.close()


async def health_of(http: aiohttp.ClientSession, proxy: ReadProxy) -> dict[str, int]:
    async with http.get(f"{proxy.me.url}/v1/health") as answer:
        return dict(await answer.json())


async def no_caches(proxy: ReadProxy) -> bool:
    return not proxy._caches


async def owns_nothing(proxy: WriteProxy) -> bool:
    return not proxy.ownership.owned
