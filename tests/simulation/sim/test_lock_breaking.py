"""Breaking a gone owner's lock (`StreamMetaStore.holder`/`break_lock`, used by
`region.ownership`) on the simulated ZooKeeper: only the node that owns the stream goes, the
holder's session lives on, and the next in the queue owns the stream at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from core.errors import OwnershipError
from global_meta.streams import StreamMetaStore
from verify.sim.io.cluster import SimCluster
from verify.sim.io.loop import run
from verify.sim.io.zookeeper import SimMetaStore


def run_on(cluster: SimCluster, body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Runs `body` on one host of the simulated cluster, within a minute of simulated time."""

    async def main() -> None:
        await cluster.start()
        host = cluster.add_host("tester", "us-east")
        async with asyncio.timeout(60):
            await cluster.loop.spawn(host, body())

    run(cluster.loop, main())


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

    run_on(cluster, body)
    assert seen["holder"] == (seen["held_path"], "wp-a@us-east", seen["first_session"])
    assert seen["broken"] is True and seen["again"] is False
    assert seen["owner_after"] == "wp-b@eu-west"
    assert seen["won_path"] != seen["held_path"]
    assert seen["first_alive"], "the broken owner's session lives on"


def test_a_queue_for_a_gone_owner_ends_when_another_takes_the_lock() -> None:
    """Two proxies queue for the lock of an owner clients could not reach (`waits_for`).
    The first in the queue takes it when the owner goes; the second stops queueing then,
    naming the winner, instead of waiting out its whole timeout behind a live owner."""
    cluster = SimCluster(1)
    seen: dict[str, object] = {}

    async def body() -> None:
        stores = [
            StreamMetaStore(await SimMetaStore.connect(cluster.ensemble), "ns") for _ in "abc"
        ]
        gone, first, second = stores
        await gone.create_stream("s")
        held = await gone.acquire("s", "wp-a", "us-east", 0.0)
        winner = asyncio.ensure_future(first.acquire("s", "wp-b", "eu-west", 5.0, "wp-a@us-east"))
        await asyncio.sleep(0.2)  # first's node is next in the queue
        loser = asyncio.ensure_future(second.acquire("s", "wp-c", "us-west", 5.0, "wp-a@us-east"))
        await asyncio.sleep(0.5)
        seen["waiting"] = not loser.done()  # the awaited owner still holds it: queued on
        await gone.release(held)
        began = asyncio.get_running_loop().time()
        seen["won"] = (await asyncio.wait_for(winner, 1.0)).owner
        try:
            await asyncio.wait_for(loser, 4.0)
        except OwnershipError as err:
            seen["lost"] = (err.owner, asyncio.get_running_loop().time() - began)
        seen["owner_after"] = await second.owner("s")
        lock_dir = f"{second.path('s')}/lock"
        sessions = [
            (await second.store.get(f"{lock_dir}/{name}"))[1].ephemeral_owner
            for name in await second.store.children(lock_dir)
        ]
        seen["second_nodes"] = sessions.count(second.store.session_id)

    run_on(cluster, body)
    assert seen["waiting"]
    assert seen["won"] == "wp-b"
    owner, after_s = seen["lost"]  # type: ignore[misc]
    assert owner == "wp-b@eu-west"
    assert after_s < 1.0, f"the loser queued on for {after_s:.2f} s behind the new owner"
    assert seen["owner_after"] == "wp-b@eu-west"
    assert seen["second_nodes"] == 0, "the loser's lock node is gone with its wait"
