"""Idempotent writes through the write proxies on the real cluster: retries answered with
where the first write landed, bulk retries that write only what had not landed, and a retry
after ownership moved to another proxy (the producer table rebuilt from the stream)."""

from __future__ import annotations

import pytest

from core.errors import BadRequestError, ProducerSeqStaleError
from localcluster.controller import Cluster
from region.client import ProxyClient
from tests.support.proxies import write_proxy
from tests.support.security import client_session
from tests.support.streams import fresh_namespace, stream_env


async def read_back(cluster: Cluster, namespace: str) -> list[tuple[bytes, int | None, int | None]]:
    async with stream_env(cluster, "us-west", namespace) as env:
        reader = await env.reader("s", follow=False)
        async with reader:
            return [(r.payload, r.producer_id, r.producer_seq) async for r in reader]


async def test_a_retried_write_lands_once_and_is_answered_with_where_it_landed(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        ProxyClient([east.config.me.url], namespace=namespace) as client,
    ):
        await client.create("s")
        producer = client.producer("s", producer_id=41)
        first = [await producer.write(f"r{i}".encode()) for i in range(3)]
        again = await client.write("s", b"r1", producer=(41, 1))  # a retry of seq 1
        assert again.duplicate and again.dlsn == first[1].dlsn and again.seq == first[1].seq
        bulk = await producer.write_bulk([b"b3", b"b4", b"b5"])
        assert [a.seq for a in bulk] == [3, 4, 5]
        # a bulk retry that overlaps: seqs 4 and 5 landed, 6 and 7 are new
        overlap = await client.write_bulk("s", [b"b4", b"b5", b"b6", b"b7"], producer=(41, 4))
        assert [a.dlsn for a in overlap[:2]] == [bulk[1].dlsn, bulk[2].dlsn]
        assert [a.seq for a in overlap[2:]] == [6, 7]
        other = await client.write("s", b"x", producer=(42, 1))  # producers are independent
        assert not other.duplicate and other.seq == 8
    records = await read_back(cluster, namespace)
    assert [r[0] for r in records] == [b"r0", b"r1", b"r2", b"b3", b"b4", b"b5", b"b6", b"b7", b"x"]
    assert [(r[1], r[2]) for r in records][:3] == [(41, 0), (41, 1), (41, 2)]
    assert records[-1][1:] == (42, 1)


async def test_a_retry_after_ownership_moved_is_not_duplicated(cluster: Cluster) -> None:
    namespace = fresh_namespace()
    async with write_proxy(cluster, "us-east") as east, write_proxy(cluster, "eu-west") as west:
        async with ProxyClient([east.config.me.url], namespace=namespace) as client:
            await client.create("s")
            plain = await client.write("s", b"plain")  # a write naming no producer
            producer = client.producer("s", producer_id=7)
            acked = [await producer.write(f"p{i}".encode()) for i in range(5)]
            await east.ownership.release(namespace, "s")  # the owner goes; west takes over
        async with ProxyClient([west.config.me.url], namespace=namespace) as client:
            retried = await client.write("s", b"p4", producer=(7, 4))
            assert retried.duplicate and retried.dlsn == acked[4].dlsn
            assert (await client.describe("s"))["owner"].endswith("@eu-west")
            fresh = await client.write("s", b"p5", producer=(7, 5))
            assert not fresh.duplicate and fresh.seq == acked[4].seq + 1 > plain.seq
            # where each producer stands, as a restarted producer asks before it resumes
            assert await client.producer_last_seq("s", 7) == 5
            assert await client.producer_last_seq("s", 8) is None
            with pytest.raises(BadRequestError, match="producer id -1 is outside"):
                await client.producer_last_seq("s", -1)
    records = await read_back(cluster, namespace)
    assert [r[0] for r in records] == [b"plain"] + [f"p{i}".encode() for i in range(6)]


async def test_bad_producer_parameters_are_refused_with_their_names(cluster: Cluster) -> None:
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        ProxyClient([east.config.me.url], namespace=namespace) as client,
        client_session() as http,
    ):
        await client.create("s")
        url = f"{east.config.me.url}/v1/namespaces/{namespace}/streams/s/records"
        for query, expected in [
            ("producer=1", "names both producer and producer_seq"),
            ("producer=x&producer_seq=1", "producer='x': expected an integer"),
            (f"producer={1 << 64}&producer_seq=0", "producer id 18446744073709551616"),
            ("producer=1&producer_seq=-1", "producer seq -1"),
        ]:
            async with http.post(f"{url}?{query}", data=b"z") as answer:
                body = await answer.json()
                assert answer.status == 400 and body["code"] == "bad_request", body
                assert expected in body["message"], body
        with pytest.raises(ProducerSeqStaleError) as stale:
            for seq in range(300):
                await client.write("s", b"w", producer=(9, seq))
            await client.write("s", b"w", producer=(9, 0))  # older than the window
        assert "with HTTP 409" in stale.value.__notes__[0]
        assert (await client.write("s", b"end")).seq == 300, "the stale retry wrote nothing"
