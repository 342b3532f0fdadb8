"""A take makes its new segment's ledger while it queues for the stream's lock
(`writer.segment_start.LedgerInAdvance`), on globelog's real writer code over the simulated
world: the segment starts on that ledger once the lock is won, and a ledger made for a
sequence that moved on, or for a take that lost, is deleted: no ledger is left that no segment
names."""

from __future__ import annotations

import asyncio

import pytest

from global_meta.streams import StreamMetaStore
from ledger import LedgerClient
from reader.log_reader import LogReader
from tests.simulation.sim.test_take_while_queued_on_sim import (
    STREAM,
    connect,
    owner_of_five,
    run_owner_and_taker,
    taker_config,
)
from verify.sim.io.cluster import SimCluster
from verify.sim.io.loop import Host
from writer.log_writer import LogWriter


def counting_creates(ledgers: LedgerClient, made: list[float]) -> None:
    """Records the loop time of every ledger `ledgers` makes."""
    create = ledgers.create

    async def timed(*args: object, **kwargs: object) -> object:
        made.append(asyncio.get_running_loop().time())
        return await create(*args, **kwargs)  # type: ignore[arg-type]

    ledgers.create = timed  # type: ignore[method-assign,assignment]


async def counted(
    cluster: SimCluster, host: Host
) -> tuple[StreamMetaStore, LedgerClient, list[float]]:
    """A taker's stores (with a reads session) and the times of the ledgers it makes."""
    streams, ledgers = await connect(cluster, host, reads=True)
    made: list[float] = []
    counting_creates(ledgers, made)
    return streams, ledgers, made


async def unnamed_ledgers(streams: StreamMetaStore, ledgers: LedgerClient) -> set[int]:
    named = {s.segment.ledger_id for s in await streams.segments(STREAM)}
    return set(await ledgers.ledger_ids()) - named


def test_a_queued_take_starts_its_segment_on_the_ledger_it_made_while_it_waited() -> None:
    """The owner keeps the lock 2 s after the taker queues: the taker's one ledger is made
    in those 2 s, and its segment starts on it."""
    cluster = SimCluster(5)
    seen: dict[str, object] = {}
    owner_open = asyncio.Event()

    async def owner(host: Host) -> None:
        writer = await owner_of_five(cluster, host)
        owner_open.set()
        await asyncio.sleep(2.0)
        await writer.close()

    async def taker(host: Host) -> None:
        streams, ledgers, made = await counted(cluster, host)
        await owner_open.wait()
        began = asyncio.get_running_loop().time()
        config = taker_config(host, cluster, 20.0, "wp-a@us-east")
        writer = await LogWriter.open(streams, ledgers, STREAM, config)
        seen["lock_won_s"] = writer.open_steps["lock"]
        seen["made_s"] = [t - began for t in made]
        await writer.write(b"b0")
        await writer.close()
        seen["unnamed"] = await unnamed_ledgers(streams, ledgers)
        reader = await LogReader.open(streams, ledgers, STREAM)
        async with reader:
            seen["read"] = [
                (await reader.read_next(timeout_s=3)).payload.decode()  # type: ignore[union-attr]
                for _ in range(6)
            ]

    run_owner_and_taker(cluster, owner, taker)
    made_s, lock_won_s = seen["made_s"], seen["lock_won_s"]
    assert isinstance(made_s, list) and isinstance(lock_won_s, float)
    assert len(made_s) == 1, f"one ledger made by the take: {made_s}"
    assert lock_won_s > 1.5, f"the take queued while the owner kept the lock: {lock_won_s}"
    assert made_s[0] < 0.5, f"made while queued, not after the lock ({lock_won_s} s): {made_s}"
    assert seen["unnamed"] == set(), "every ledger is a segment's"
    assert seen["read"] == [f"a{i}" for i in range(5)] + ["b0"]


@pytest.mark.parametrize("then", ["close", "abandon"])
def test_a_ledger_made_for_a_sequence_that_moved_on_is_deleted(then: str) -> None:
    """The owner rolls to a new segment after the taker's early read: the ledger made for
    the sequence that read gave is not the new segment's, and is deleted, beside the new
    writer: also when that writer is abandoned at once (its end does not cut the delete
    short)."""
    cluster = SimCluster(5)
    seen: dict[str, object] = {}
    owner_open, queued = asyncio.Event(), asyncio.Event()

    async def owner(host: Host) -> None:
        writer = await owner_of_five(cluster, host)
        owner_open.set()
        await queued.wait()
        writer.roll_now()
        await writer.write(b"a5")
        await writer.close()

    async def taker(host: Host) -> None:
        streams, ledgers, made = await counted(cluster, host)
        await owner_open.wait()
        config = taker_config(host, cluster, 20.0, "wp-a@us-east")
        taking = asyncio.ensure_future(LogWriter.open(streams, ledgers, STREAM, config))
        await asyncio.sleep(1.0)  # read, its ledger made, queued
        queued.set()
        writer = await taking
        seen["made"] = len(made)
        seen["segment"] = writer.segment.sequence
        if then == "abandon":
            await writer.abandon(release_lock=True)
        else:
            await writer.write(b"b0")
            await writer.close()
        await asyncio.sleep(2.0)  # the delete runs beside the writer, not within its close
        seen["unnamed"] = await unnamed_ledgers(streams, ledgers)

    run_owner_and_taker(cluster, owner, taker)
    assert seen["segment"] == 3, seen
    assert seen["made"] == 2, f"one made in advance for segment 2, one for 3: {seen}"
    assert seen["unnamed"] == set(), "the ledger made for segment 2 is deleted"


def test_a_take_that_loses_the_lock_leaves_no_ledger() -> None:
    """A take that does not wait (lock_timeout_s 0) meets a live owner: OwnershipError, and
    the ledger it began making beside its queueing is deleted."""
    cluster = SimCluster(5)
    seen: dict[str, object] = {}
    owner_open, tried = asyncio.Event(), asyncio.Event()

    async def owner(host: Host) -> None:
        writer = await owner_of_five(cluster, host)
        owner_open.set()
        await tried.wait()
        await writer.close()

    async def taker(host: Host) -> None:
        streams, ledgers, made = await counted(cluster, host)
        await owner_open.wait()
        config = taker_config(host, cluster, 0.0, "wp-a@us-east")
        before = set(await ledgers.ledger_ids())
        tried_at = asyncio.get_running_loop().time()
        try:
            await LogWriter.open(streams, ledgers, STREAM, config)
        except Exception as err:  # noqa: BLE001 - the test names what it got
            seen["error"] = type(err).__name__
        seen["made"] = len(made)
        seen["answered_s"] = asyncio.get_running_loop().time() - tried_at
        await asyncio.sleep(2.0)  # the delete runs beside, the answer does not wait for it
        seen["new"] = set(await ledgers.ledger_ids()) - before
        tried.set()

    run_owner_and_taker(cluster, owner, taker)
    assert seen["error"] == "OwnershipError", seen
    assert seen["made"] == 1, seen
    assert seen["new"] == set(), "the ledger made for the lost take is deleted"
