"""A write proxy lets go of an idle stream whose open ensemble names a lost bookie, so its
segment completes and the rebuilders can re-make the copies it held there (they leave an
open ensemble to its writer). Real bookies, ZooKeeper and a write proxy."""

from __future__ import annotations

import asyncio

from core.segments import SegmentState
from localcluster import controller
from localcluster.controller import Cluster
from localcluster.probes import wait_until
from localcluster.tools import Tools
from region.client import ProxyClient
from tests.support.proxies import write_proxy
from tests.support.streams import fresh_namespace

LOST_AFTER_S = 1.0


async def test_an_idle_stream_writing_to_a_lost_bookie_is_released_and_its_segment_completed(
    cluster: Cluster, tools: Tools
) -> None:
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east", lost_bookie_delay_s=LOST_AFTER_S) as east,
        ProxyClient([east.config.me.url], namespace) as client,
    ):
        await client.create("idle")
        for i in range(3):
            await client.write("idle", f"r{i}".encode())
        # after the last ack the writer sends readers the LAC within the flush SLA (a control
        # record); then nothing more goes to the bookies: the stream is idle
        await asyncio.sleep(1.0)
        owned = east.ownership.owned_here(namespace, "idle")
        assert owned is not None
        victim = owned.writer.open_bookies[1]
        name = next(b.name for b in cluster.topology.bookies if b.bookie_id == victim)
        streams = east.ownership.streams(namespace)
        try:
            await controller.fault(cluster, tools, "kill", name)

            async def completed() -> bool:
                segments = await streams.segments("idle")
                return [s.segment.state for s in segments] == [SegmentState.COMPLETED]

            # the bookie's registration ends with its ZooKeeper session, then LOST_AFTER_S
            await wait_until("the idle stream's segment completed", completed, 60)
            assert east.ownership.owned_here(namespace, "idle") is None  # released
            assert (await streams.segments("idle"))[0].segment.record_count == 3
        finally:
            await controller.fault(cluster, tools, "restart", name)
        written = await client.write("idle", b"after")  # taken again, the stream goes on
        assert written.seq == 3
