"""A take queued behind a gone owner reads the stream while it waits (`LogWriter.open` with
`lock_waits_for`: after the lock, those reads would wait in the proxy's ZooKeeper session
behind other takes' writes). When the owner moved on after that read (here: it rolls to a new
segment, writes on, then lets the stream go), the view is stale: the take's compare-and-set
fails and it reads again, on globelog's real writer code over the simulated world."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

import pytest

from core.streams import StreamSettings
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient, LedgerConfig
from ledger.drivers.client import READ_THROUGH_WAIT_S
from reader.log_reader import LogReader
from verify.sim.io.cluster import PASSWORD, SimCluster
from verify.sim.io.loop import Host, run
from verify.sim.io.zookeeper import SimMetaStore
from writer.log_writer import EARLY_READ_WAIT_S, LogWriter, WriterConfig

STREAM = "s"


async def connect(
    cluster: SimCluster, host: Host, reads: bool = False
) -> tuple[StreamMetaStore, LedgerClient]:
    """A host's stream store and ledger client; `reads`: the store reads that may be stale
    through a second session."""
    store = await SimMetaStore.connect(cluster.ensemble)
    second = await SimMetaStore.connect(cluster.ensemble) if reads else None
    config = LedgerConfig(region=host.region, password=PASSWORD, min_regions_for_durability=2)
    return StreamMetaStore(store, "ns", second), await LedgerClient.connect(store, config)


async def owner_of_five(cluster: SimCluster, host: Host) -> LogWriter:
    """The stream made and taken by `host`, with records a0..a4 written."""
    streams, ledgers = await connect(cluster, host)
    await streams.create_stream(STREAM)
    replication = cluster.topology.replication
    config = WriterConfig(region=host.region, replication=replication, owner=host.name)
    writer = await LogWriter.open(streams, ledgers, STREAM, config)
    for i in range(5):
        await writer.write(f"a{i}".encode())
    return writer


def taker_config(host: Host, cluster: SimCluster, wait_s: float, waits_for: str) -> WriterConfig:
    return WriterConfig(
        region=host.region,
        replication=cluster.topology.replication,
        settings=dataclasses.replace(StreamSettings(), lock_timeout_s=wait_s),
        owner=host.name,
        lock_waits_for=waits_for,
    )


def run_owner_and_taker(
    cluster: SimCluster,
    owner: Callable[[Host], Awaitable[None]],
    taker: Callable[[Host], Awaitable[None]],
) -> None:
    """`owner` on a us-east host and `taker` on an eu-west one, run to their ends."""

    async def main() -> None:
        await cluster.start()
        first = cluster.add_host("wp-a", "us-east")
        second = cluster.add_host("wp-b", "eu-west")
        owning = cluster.loop.spawn(first, owner(first))
        async with asyncio.timeout(120):
            await cluster.loop.spawn(second, taker(second))
        await owning

    run(cluster.loop, main())


@pytest.mark.parametrize("reads_session", [False, True], ids=["one session", "reads session"])
def test_a_take_whose_early_read_went_stale_reads_again(reads_session: bool) -> None:
    """With `reads_session`, the taker reads early through a second session of its own (as a
    write proxy does), which sees the owner's later roll no sooner."""
    cluster = SimCluster(5)
    replication = cluster.topology.replication
    seen: dict[str, object] = {}
    queued, owner_open = asyncio.Event(), asyncio.Event()

    async def owner(host: Host) -> None:
        writer = await owner_of_five(cluster, host)
        owner_open.set()
        await queued.wait()  # the other take has read the stream and queues for the lock
        writer.roll_now()
        for i in range(5, 10):
            await writer.write(f"a{i}".encode())
        seen["owner_segment"] = writer.segment.sequence
        await writer.close()  # completes its segment, lets the lock go

    async def taker(host: Host) -> None:
        streams, ledgers = await connect(cluster, host, reads_session)
        seen["unordered_apart"] = streams.unordered is not streams
        await owner_open.wait()
        settings = dataclasses.replace(StreamSettings(), lock_timeout_s=20.0)
        config = WriterConfig(
            region=host.region,
            replication=replication,
            settings=settings,
            owner=host.name,
            lock_waits_for="wp-a@us-east",
        )
        taking = asyncio.ensure_future(LogWriter.open(streams, ledgers, STREAM, config))
        await asyncio.sleep(1.0)  # its early read is long done; it waits for the lock
        queued.set()
        writer = await taking
        seen["steps"] = dict(writer.open_steps)
        seen["taker_segment"] = writer.segment.sequence
        await writer.write(b"b0")
        await writer.close()
        reader = await LogReader.open(streams, ledgers, STREAM)
        async with reader:
            seen["read"] = [
                (await reader.read_next(timeout_s=3)).payload.decode()  # type: ignore[union-attr]
                for _ in range(11)
            ]

    run_owner_and_taker(cluster, owner, taker)
    assert seen["owner_segment"] == 2, "the owner rolled after the taker's early read"
    steps = seen["steps"]
    assert isinstance(steps, dict) and "stale" in steps, f"read again: {steps}"
    assert all(seconds >= 0 for seconds in steps.values()), steps  # each step's own time
    assert seen["taker_segment"] == 3
    assert seen["unordered_apart"] is reads_session
    assert seen["read"] == [f"a{i}" for i in range(10)] + ["b0"]


class SilentSession:
    """A reads session that never answers (its node away, its connection hung)."""

    async def _never(self, *args: object, **kwargs: object) -> object:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    children = get = get_many = exists = _never


@pytest.mark.parametrize("waits_for", ["wp-gone@us-east", None], ids=["queued", "lock free"])
def test_a_take_whose_reads_session_never_answers_reads_through_its_own_session(
    waits_for: str | None,
) -> None:
    """With a reads session every take reads early through it, queued behind a gone owner or
    not; that read is waited for EARLY_READ_WAIT_S at most once the lock is won, then the
    stream is read through the main session, and the take ends."""
    cluster = SimCluster(5)
    seen: dict[str, object] = {}

    async def taker(host: Host) -> None:
        store = await SimMetaStore.connect(cluster.ensemble)
        config = LedgerConfig(region=host.region, password=PASSWORD, min_regions_for_durability=2)
        streams = StreamMetaStore(store, "ns", SilentSession())  # type: ignore[arg-type]
        ledgers = await LedgerClient.connect(store, config)
        await streams.create_stream(STREAM)
        writer_config = WriterConfig(
            region=host.region,
            replication=cluster.topology.replication,
            owner=host.name,
            lock_waits_for=waits_for,
        )
        writer = await LogWriter.open(streams, ledgers, STREAM, writer_config)
        seen["steps"] = dict(writer.open_steps)
        await writer.write(b"after")
        await writer.close()

    async def main() -> None:
        await cluster.start()
        host = cluster.add_host("wp-b", "eu-west")
        async with asyncio.timeout(60):
            await cluster.loop.spawn(host, taker(host))

    run(cluster.loop, main())
    steps = seen["steps"]
    assert isinstance(steps, dict)
    assert EARLY_READ_WAIT_S <= steps["segments"] < EARLY_READ_WAIT_S + 1.0, steps


class TornReads:
    """A reads session whose answers for a segment's znode come only once `later` is set,
    while everything else is answered at once: a take's early view whose counters were
    read before the owner completed its segment and whose segment was read after."""

    def __init__(self, inner: SimMetaStore, later: asyncio.Event) -> None:
        self.inner, self.later = inner, later

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def get(self, path: str) -> object:
        if "/segments/" in path:
            await self.later.wait()
        return await self.inner.get(path)


def test_a_torn_early_view_fails_the_segment_start_and_the_take_reads_again() -> None:
    """The owner completes its segment between the early view's counters and its segment:
    the view shows the segment completed and the counters from before it. The new segment
    must not start from those counters (its sequence ids would be handed out twice): its
    start checks the counters' version, fails, and the take reads again."""
    cluster = SimCluster(5)
    replication = cluster.topology.replication
    seen: dict[str, object] = {}
    owner_open, closed = asyncio.Event(), asyncio.Event()

    async def owner(host: Host) -> None:
        writer = await owner_of_five(cluster, host)
        owner_open.set()
        await asyncio.sleep(0.5)  # the taker has read the counters and waits for the lock
        await writer.close()  # completes the segment: the counters move to next_seq 5
        closed.set()

    async def taker(host: Host) -> None:
        store = await SimMetaStore.connect(cluster.ensemble)
        torn = TornReads(await SimMetaStore.connect(cluster.ensemble), closed)
        streams = StreamMetaStore(store, "ns", torn)  # type: ignore[arg-type]
        config = LedgerConfig(region=host.region, password=PASSWORD, min_regions_for_durability=2)
        ledgers = await LedgerClient.connect(store, config)
        await owner_open.wait()
        settings = dataclasses.replace(StreamSettings(), lock_timeout_s=20.0)
        writer_config = WriterConfig(
            region=host.region, replication=replication, owner=host.name, settings=settings
        )
        writer = await LogWriter.open(streams, ledgers, STREAM, writer_config)
        seen["steps"] = dict(writer.open_steps)
        seen["first_seq"] = writer.segment.first_seq
        await writer.write(b"b0")
        await writer.close()

    run_owner_and_taker(cluster, owner, taker)
    assert seen["first_seq"] == 5, seen
    steps = seen["steps"]
    assert isinstance(steps, dict) and "stale" in steps, steps


def test_a_take_whose_reads_session_never_answers_recovers_through_its_own_session() -> None:
    """The last owner goes with its segment in progress: the take's recovery reads the
    ledger's metadata through the reads session (which never answers) for READ_THROUGH_WAIT_S,
    then through its own, and the take ends with every record there."""
    cluster = SimCluster(5)
    seen: dict[str, object] = {}
    owner_open = asyncio.Event()

    async def owner(host: Host) -> None:
        writer = await owner_of_five(cluster, host)
        owner_open.set()
        await asyncio.sleep(0.5)
        await writer.abandon(release_lock=True)  # gone: its segment left in progress

    async def taker(host: Host) -> None:
        store = await SimMetaStore.connect(cluster.ensemble)
        config = LedgerConfig(region=host.region, password=PASSWORD, min_regions_for_durability=2)
        streams = StreamMetaStore(store, "ns", SilentSession())  # type: ignore[arg-type]
        ledgers = await LedgerClient.connect(store, config)
        await owner_open.wait()
        writer_config = taker_config(host, cluster, 20.0, "wp-a@us-east")
        writer = await LogWriter.open(streams, ledgers, STREAM, writer_config)
        seen["steps"] = dict(writer.open_steps)
        await writer.write(b"b0")
        await writer.close()
        reader = await LogReader.open(StreamMetaStore(store, "ns"), ledgers, STREAM)
        async with reader:
            seen["read"] = [
                (await reader.read_next(timeout_s=3)).payload.decode()  # type: ignore[union-attr]
                for _ in range(6)
            ]

    run_owner_and_taker(cluster, owner, taker)
    steps = seen["steps"]
    assert isinstance(steps, dict) and "recovery" in steps, steps
    assert READ_THROUGH_WAIT_S <= steps["recovery"] < READ_THROUGH_WAIT_S + 2.0, steps
    assert seen["read"] == [f"a{i}" for i in range(5)] + ["b0"]
