"""globelog's Python client beyond single writes, against real proxies: a batching writer, a
reader through a read proxy, and the synchronous wrapper (used from a thread of its own)."""

from __future__ import annotations

import asyncio

from localcluster.controller import Cluster
from region.client import BatchingWriter, ProxyClient, ReadClient, SyncProxyClient
from region.registry import live_urls
from tests.support.proxies import read_proxy, write_proxy
from tests.support.streams import fresh_namespace, stream_env


async def test_a_batching_writer_a_read_client_and_the_sync_wrapper(cluster: Cluster) -> None:
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        read_proxy(cluster, "eu-west") as reader_proxy,
        ProxyClient([east.config.me.url], namespace=namespace) as client,
    ):
        await client.create("s")
        batcher = BatchingWriter(client, "s", max_records=1000)
        futures = [batcher.write(f"r{i}".encode()) for i in range(2500)]
        assert sum(f.done() for f in futures) < 2500, "the last 500 wait for flush()"
        await batcher.flush()
        acked = [f.result() for f in futures]
        assert [a.seq for a in acked] == list(range(2500))

        def synchronous() -> int:
            with SyncProxyClient([east.config.me.url], namespace) as sync:
                return sync.write("s", b"from-a-thread").seq

        assert await asyncio.to_thread(synchronous) == 2500
        async with stream_env(cluster, "us-east", namespace) as env:  # proxies found in ZooKeeper
            assert east.config.me.url in await live_urls(env.store, "write", "us-east")
            assert reader_proxy.me.url in await live_urls(env.store, "read", "eu-west")
        async with ReadClient([reader_proxy.me.url], namespace) as reader:
            records = [r async for r in reader.read("s", from_seq=0, follow=False)]
            tail = reader.read("s", from_seq=2501)
            pending = asyncio.ensure_future(anext(tail))
            await asyncio.sleep(0.2)
            assert not pending.done(), "a following read waits for the next record"
            await client.write("s", b"next")
            assert (await asyncio.wait_for(pending, 10)).payload == b"next"
            await tail.aclose()
    assert [r.payload for r in records] == [f"r{i}".encode() for i in range(2500)] + [
        b"from-a-thread"
    ]
    assert [r.dlsn for r in records[:2500]] == [a.dlsn for a in acked]
