"""A producer table rebuilt by readers of several segments at once (region/idempotence/
rebuild.py) is the table one reader of the whole scan builds, on globelog's real writer,
reader and idempotence code over the simulated world: same producers, same last seqs, same
acks, and the same order (which decides who is forgotten first)."""

from __future__ import annotations

import asyncio
import random

import pytest

from core.records import Record
from reader.log_reader import LogReader, ReaderConfig
from reader.positions import By, Position
from region.idempotence import rebuild
from region.idempotence.producers import ProducerTable
from tests.simulation.sim.test_take_while_queued_on_sim import STREAM, connect
from verify.sim.io.cluster import SimCluster
from verify.sim.io.loop import Host, run
from writer.events import Written
from writer.log_writer import LogWriter, WriterConfig


def table_state(table: ProducerTable) -> list[tuple[int, int | None, list[tuple[int, Written]]]]:
    """Each producer in the table's order, with its last seq and its acks in order."""
    return [
        (producer, known.last_seq, list(known.acks.items()))
        for producer, known in table._producers.items()
    ]


async def one_reader_table(
    host_streams: object, ledgers: object, start: int, upto: int
) -> ProducerTable:
    """The table as a single reader of seq start..upto-1 builds it."""
    table = ProducerTable()
    config = ReaderConfig(follow=False, end_seq=upto)
    reader = await LogReader.open(host_streams, ledgers, STREAM, Position(By.SEQ, start), config)  # type: ignore[arg-type]
    async with reader:
        async for record in reader:
            if record.seq >= upto:
                break
            if record.producer_id is not None and record.producer_seq is not None:
                table.record(
                    record.producer_id, record.producer_seq,
                    Written(record.dlsn, record.txid, record.seq),
                )  # fmt: skip
    return table


@pytest.mark.parametrize("owned", [False, True], ids=["closed", "owned"])
@pytest.mark.parametrize("seed", range(1, 7))
def test_a_rebuild_by_several_readers_builds_the_table_one_reader_builds(
    seed: int, owned: bool
) -> None:
    """`owned`: as a new owner rebuilds it, its writer open and its segment named (the scan
    then reads through the reads session, whose view holds that segment)."""
    choices = random.Random(seed)
    cluster = SimCluster(5)
    seen: dict[str, object] = {}

    async def writer_and_rebuilds(host: Host) -> None:
        streams, ledgers = await connect(cluster, host, reads=True)
        await streams.create_stream(STREAM)
        config = WriterConfig(
            region=host.region, replication=cluster.topology.replication, owner=host.name
        )
        writer = await LogWriter.open(streams, ledgers, STREAM, config)
        producer_seqs: dict[int, int] = {}
        for _ in range(choices.randint(10, 16)):  # segments of uneven sizes
            for _ in range(choices.choice([0, 1, 3, 20, 60])):
                producer = choices.randint(1, 6)
                if choices.random() < 0.2:
                    await writer.write(Record(b"plain"))
                    continue
                seq = producer_seqs[producer] = producer_seqs.get(producer, -1) + 1
                await writer.write(Record(b"p", producer=(producer, seq)))
            writer.roll_now()
            await writer.write(Record(b"after the roll"))
        owner_segment = None
        if owned:
            upto, owner_segment = writer.segment.first_seq, writer.segment.sequence
        else:
            upto = writer.next_seq
            await writer.close()
        scan = choices.randint(max(1, upto // 2), upto)
        # a proxy's readers at once, shared by its rebuilds: here one or two at a time
        readers = asyncio.Semaphore(seed % 2 + 1) if seed > 3 else None
        rebuilt = await rebuild.rebuild_table(
            streams, ledgers, STREAM, upto, scan_records=scan, owner_segment=owner_segment,
            readers=readers,
        )  # fmt: skip
        reference = await one_reader_table(streams, ledgers, max(0, upto - scan), upto)
        seen["rebuilt"], seen["reference"] = table_state(rebuilt), table_state(reference)
        seen["segments"] = len(await streams.segments(STREAM))

    async def main() -> None:
        await cluster.start()
        host = cluster.add_host("wp-a", "us-east")
        async with asyncio.timeout(300):
            await cluster.loop.spawn(host, writer_and_rebuilds(host))

    run(cluster.loop, main())
    assert isinstance(seen["segments"], int) and seen["segments"] > rebuild.REBUILD_READERS
    assert seen["rebuilt"] == seen["reference"]
    assert seen["reference"], "the scan found producers"
