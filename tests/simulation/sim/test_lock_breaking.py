"""Breaking a gone owner's lock (`StreamMetaStore.holder`/`break_lock`, used by
`region.ownership`) on the simulated ZooKeeper: only the node that owns the stream goes, the
holder's session lives on, and the next in the queue owns the stream at once."""

from __future__ import annotations

import asyncio

from global_meta.streams import StreamMetaStore
from verify.sim.io.cluster import SimCluster
from verify.sim.io.loop import run
from verify.sim.io.zookeeper import SimMetaStore


def test_breaking_deletes_only_the_owning_node_and_the_queue_moves_on() -> None:
    cluster = SimCluster(1)
    seen: dict[str, object] = {}

    async def body() -> None:
        first = StreamMetaStore(await SimMetaStore.connect(cluster.ensemble), "ns")
        second = StreamMetaStore(await SimMetaStore.connect(cluster.ensemble), "ns")
        await first.create_stream("s")
        held = await first.acquire("s", "wp-a", "us-east", 0.0)
        queued = asyncio.ensure_future(second.acquire("s", "wp-b", "eu-west", 5.0))
        await asyncio.sleep(0.5)  # second's node is in the queue, behind first's
        holder = await second.holder("s")
        assert holder is not None
        seen["holder"] = (holder.path, holder.owner, holder.session)
        seen["first_session"] = first.store.session_id
        seen["held_path"] = held.path
        seen["broken"] = await second.break_lock(holder)
        seen["again"] = await second.break_lock(holder)  # gone already: nothing to do
        won = await asyncio.wait_for(queued, 1.0)
        seen["owner_after"] = await first.owner("s")
        seen["won_path"] = won.path
        seen["first_alive"] = first.store.session_id is not None

    async def main() -> None:
        await cluster.start()
        host = cluster.add_host("tester", "us-east")
        async with asyncio.timeout(60):
            await cluster.loop.spawn(host, body())

    run(cluster.loop, main())
    assert seen["holder"] == (seen["held_path"], "wp-a@us-east", seen["first_session"])
    assert seen["broken"] is True and seen["again"] is False
    assert seen["owner_after"] == "wp-b@eu-west"
    assert seen["won_path"] != seen["held_path"]
    assert seen["first_alive"], "the broken owner's session lives on"
