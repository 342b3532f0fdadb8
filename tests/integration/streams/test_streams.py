"""Log streams on the real cluster: write, read back from other regions, roll, take over."""

from __future__ import annotations

import asyncio

from core.records import Record
from core.streams import TransmitPolicy
from localcluster.controller import Cluster
from tests.support.streams import fresh_namespace, stream_env
from writer.events import Written


async def test_records_written_in_one_region_are_read_in_order_in_another(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with (
        stream_env(cluster, "us-east", namespace) as east,
        stream_env(cluster, "eu-west", namespace) as west,
    ):
        await east.streams.create_stream("orders")
        writer = await east.writer("orders")
        written = await writer.write_bulk([f"order-{i}".encode() for i in range(50)])
        written.append(await writer.write(Record(b"last")))
        dlsns = [w.dlsn for w in written]
        assert [w.seq for w in written] == list(range(51))
        await writer.close()
        assert dlsns == sorted(dlsns) and len(set(dlsns)) == 51
        reader = await west.reader("orders", follow=False)
        async with reader:
            records = [r async for r in reader]
        assert [r.payload for r in records] == [f"order-{i}".encode() for i in range(50)] + [
            b"last"
        ]
        assert [r.dlsn for r in records] == dlsns
        assert [r.seq for r in records] == list(range(51))
        assert {r.writer_region for r in records} == {"us-east"}


async def test_a_tailing_reader_sees_every_record_once_across_segment_rolls(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with (
        stream_env(cluster, "us-east", namespace) as east,
        stream_env(cluster, "us-west", namespace) as west,
    ):
        await east.streams.create_stream("tail")
        writer = await east.writer("tail", segment_roll_bytes=2000, buffer_bytes=0)
        reader = await west.reader("tail")
        count = 200

        async def produce() -> None:
            for i in range(count):
                await writer.write(f"{i:04d}".encode() * 10)
            await writer.close()

        async def consume() -> list[bytes]:
            got = []
            while len(got) < count:
                record = await reader.read_next(timeout_s=30)
                assert record is not None
                got.append(record.payload)
            return got

        _, got = await asyncio.gather(produce(), consume())
        await reader.close()
        assert got == [f"{i:04d}".encode() * 10 for i in range(count)]
        segments = await east.streams.segments("tail")
        assert len(segments) >= 4  # 8000 bytes at 2000 bytes a segment


async def test_a_periodic_flush_counts_its_interval_from_the_write_after_an_idle_spell(
    cluster: Cluster,
) -> None:
    """The writer's machine is told the time on each write: a record written after the
    writer sat idle waits its flush interval, and is not sent at once as if the interval had
    started at the last tick."""
    async with stream_env(cluster, "us-east", fresh_namespace()) as east:
        await east.streams.create_stream("idle")
        writer = await east.writer("idle", transmit=TransmitPolicy.PERIODIC, flush_interval_s=0.5)
        loop = asyncio.get_running_loop()
        for _ in range(2):
            await asyncio.sleep(1.0)  # idle: no tick reaches the machine meanwhile
            sent_at = loop.time()
            await writer.write(b"after a pause")
            assert loop.time() - sent_at >= 0.5, "flushed before its interval had passed"
        await writer.close()


async def test_bulk_and_single_writes_interleaved_get_their_own_positions(
    cluster: Cluster,
) -> None:
    """Bulk writes larger than the writer's room (so accepted in several runs) and single
    writes between them: each caller gets the DLSNs of its own records, in stream order."""
    async with stream_env(cluster, "us-east", fresh_namespace()) as east:
        await east.streams.create_stream("mixed")
        writer = await east.writer("mixed", pending_writes_max=300, buffer_bytes=4096)
        bulks = [[f"bulk{b}-{i}".encode() for i in range(700)] for b in range(3)]
        singles = [f"single-{i}".encode() for i in range(40)]

        async def one_by_one() -> list[Written]:
            return [await writer.write(payload) for payload in singles]

        assert await writer.write_bulk([]) == []
        *bulk_results, single_results = await asyncio.gather(
            *(writer.write_bulk(bulk) for bulk in bulks), one_by_one()
        )
        await writer.close()
        reader = await east.reader("mixed", follow=False)
        async with reader:
            at = {r.dlsn: r.payload async for r in reader}
        for payloads, results in [
            *zip(bulks, bulk_results, strict=True),
            (singles, single_results),
        ]:
            assert [at[w.dlsn] for w in results] == payloads
            assert [w.dlsn for w in results] == sorted(w.dlsn for w in results)
        assert len(at) == 3 * 700 + 40
