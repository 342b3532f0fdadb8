"""What a region change asks of running proxies, on the session cluster: a republished
replication taken by the segments started after it (earlier ones keep theirs, each audited
against its own), and a whole region drained (its write proxies let every stream go)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from core.routes import PublishedTopology
from core.topology import Replication
from global_meta import MetaStore
from ledger import audit_ledgers
from localcluster.controller import Cluster
from localcluster.metadata import read_published, write_published
from localcluster.probes import wait_until
from region.client import ProxyClient
from region.drain import drain_targets, set_region_drained
from tests.support.proxies import write_proxy
from tests.support.streams import fresh_namespace, stream_env

# five copies over three regions; the test's proxies are configured with 3/3/2
REPUBLISHED = Replication(5, 5, 3, 2)


@asynccontextmanager
async def republished(store: MetaStore, change: object) -> AsyncIterator[PublishedTopology]:
    """The published topology changed by `change` for the test, put back after it."""
    current = await read_published(store)
    assert current is not None
    before, version = current
    after = change(before)  # type: ignore[operator]
    await write_published(store, after, version)
    try:
        yield after
    finally:
        now = await read_published(store)
        assert now is not None
        await write_published(store, before, now[1])


async def test_a_republished_replication_is_taken_by_segments_started_after_it(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        ProxyClient([east.config.me.url], namespace=namespace) as client,
        stream_env(cluster, "us-east", namespace) as env,
    ):
        await client.create("s")
        await client.write("s", b"before")
        async with republished(
            env.store, lambda p: dataclasses.replace(p, replication=REPUBLISHED)
        ):

            async def seen() -> bool:  # the proxy's ledger client follows the znode
                return east._ledgers.published.replication == REPUBLISHED

            await wait_until("the proxy reading the new replication", seen, 10.0)
            await east.ownership.release(namespace, "s")  # its next segment starts now
            await client.write("s", b"after")
        segments = [v.segment for v in await env.streams.segments("s")]
        reports, adhere = await audit_ledgers(env.store, [s.ledger_id for s in segments], 2)
    assert len(segments) == 2
    assert [(r["ensemble_size"], r["write_quorum"], r["ack_quorum"]) for r in reports] == [
        (3, 3, 2),  # started before: keeps the one it was made with
        (5, 5, 3),
    ]
    assert adhere, reports
    assert [a["adherence"] for r in reports for a in r["audit"]] == ["meets_strict"] * 2


async def test_a_drained_region_lets_every_stream_go_and_is_no_drain_target(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        write_proxy(cluster, "eu-west") as west,  # the only proxy of another region
        ProxyClient([east.config.me.url], namespace=namespace) as client,
        stream_env(cluster, "us-east", namespace) as env,
    ):
        for name in ("a", "b"):
            await client.create(name)
            await client.write(name, b"1")
        assert {(namespace, "a"), (namespace, "b")} <= east.ownership.owned_keys()
        assert "us-east" in await drain_targets(env.store, "eu-west")
        try:
            assert await set_region_drained(env.store, "us-east", True)

            async def released() -> bool:
                return not {(namespace, "a"), (namespace, "b")} & east.ownership.owned_keys()

            await wait_until("us-east releasing every stream", released, 10.0)
            # writes sent to us-east go to another region's proxy, which takes the streams
            for name in ("a", "b"):
                assert (await client.write(name, b"2")).seq == 1
                assert (await client.describe(name))["owner"] == "wp-eu-west@eu-west"
            assert {(namespace, "a"), (namespace, "b")} <= west.ownership.owned_keys()
            assert "us-east" not in await drain_targets(env.store, "eu-west")
        finally:
            await set_region_drained(env.store, "us-east", False)
