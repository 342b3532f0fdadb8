"""Reading streams on the real cluster: positions, truncation, retention and lost data."""

from __future__ import annotations

import asyncio

import pytest

from core.dlsn import DLSN
from core.errors import DataLossError, TruncatedPositionError
from core.records import LogRecord, Record
from core.streams import TransmitPolicy
from localcluster.controller import Cluster
from reader.log_reader import LogReader
from reader.positions import By, Position
from tests.support.streams import StreamEnv, fresh_namespace, stream_env
from writer.admin import apply_retention, truncate
from writer.events import Written

RECORDS = 120
ROLL_BYTES = 1500  # about 8 segments for RECORDS records of ~100 bytes


async def write_multisegment(env: StreamEnv, stream: str) -> list[Written]:
    """RECORDS records with rising explicit txids (10, 20, ...), over several segments."""
    await env.streams.create_stream(stream)
    writer = await env.writer(
        stream, segment_roll_bytes=ROLL_BYTES, transmit=TransmitPolicy.IMMEDIATE
    )
    written = []
    for i in range(RECORDS):
        written.append(await writer.write(Record(f"r{i:03d}".encode() * 25, txid=10 * (i + 1))))
        if i % 10 == 0:
            await asyncio.sleep(0.01)  # spread write times, so positions by time differ
    await writer.close()
    return written


async def read_all(reader: LogReader) -> list[LogRecord]:
    async with reader:
        return [r async for r in reader]


async def test_positions_by_dlsn_txid_seq_and_time_land_on_the_right_record(
    cluster: Cluster,
) -> None:
    async with stream_env(cluster, "us-west", fresh_namespace()) as env:
        written = await write_multisegment(env, "p")
        assert len({w.dlsn.segment for w in written}) >= 5, "the stream spans several segments"
        records = await read_all(await env.reader("p", follow=False))
        assert [r.dlsn for r in records] == [w.dlsn for w in written]
        for index in (0, 1, 37, 64, RECORDS - 1):
            target = written[index]
            cases = {
                "dlsn": Position(By.DLSN, target.dlsn),
                "txid": Position(By.TXID, target.txid),
                "txid between": Position(By.TXID, target.txid - 5),
                "seq": Position(By.SEQ, target.seq),
                "time": Position(By.TIME, records[index].write_time_ms),
            }
            for name, position in cases.items():
                reader = await env.reader("p", position, follow=False)
                async with reader:
                    first = await reader.read_next(timeout_s=30)
                assert first is not None, (name, index)
                if name == "time":  # records of one entry share a write time
                    assert first.write_time_ms >= records[index].write_time_ms
                    assert first.seq <= index, (name, index, first)
                else:
                    assert first.seq == index, (name, index, first)
        beyond = await env.reader("p", Position(By.TXID, 10 * RECORDS + 1), follow=False)
        assert await read_all(beyond) == []


async def test_truncation_refuses_positions_before_the_first_active_record(
    cluster: Cluster,
) -> None:
    async with stream_env(cluster, "eu-west", fresh_namespace()) as env:
        written = await write_multisegment(env, "t")
        cut = written[50]
        result = await truncate(env.streams, "t", cut.dlsn)
        assert result.truncated and (result.partial == cut.dlsn.segment or cut.dlsn.slot == 0)
        with pytest.raises(TruncatedPositionError, match=str(cut.dlsn)):
            await env.reader("t", Position(By.DLSN, written[10].dlsn))
        with pytest.raises(TruncatedPositionError):
            await env.reader("t", Position(By.SEQ, 3))
        earliest = await read_all(await env.reader("t", follow=False))
        assert [r.seq for r in earliest] == list(range(50, RECORDS))
        by_txid = await read_all(await env.reader("t", Position(By.TXID, 0), follow=False))
        assert by_txid[0].seq == 50


async def test_retention_deletes_expired_segments_metadata_first_and_a_dry_run_changes_nothing(
    cluster: Cluster,
) -> None:
    async with stream_env(cluster, "us-east", fresh_namespace()) as env:
        written = await write_multisegment(env, "ttl")
        before = await env.streams.segments("ttl")
        dry = await apply_retention(
            env.streams, env.ledgers, "ttl", 1.0, dry_run=True, now_ms=2**62
        )
        assert len(dry.expired) == len(before)
        assert await env.streams.segments("ttl") == before
        # Expire the first two segments only: completed before a cut-off just after them.
        cutoff = before[1].segment.completed_ms + 1
        some = await apply_retention(env.streams, env.ledgers, "ttl", 1.0, now_ms=cutoff + 1000)
        assert [s.sequence for s in some.expired] == [1, 2]
        first_kept = before[2].segment
        with pytest.raises(TruncatedPositionError, match=str(first_kept.first_dlsn)):
            await env.reader("ttl", Position(By.DLSN, written[0].dlsn))
        records = await read_all(await env.reader("ttl", follow=False))
        assert records[0].seq == first_kept.first_seq and records[-1].seq == RECORDS - 1
        # Every segment expired: nothing is readable, old positions are refused, and a new
        # writer continues the stream after them.
        everything = await apply_retention(env.streams, env.ledgers, "ttl", 1.0, now_ms=2**62)
        assert everything.kept == 0
        assert await read_all(await env.reader("ttl", follow=False)) == []
        with pytest.raises(TruncatedPositionError):
            await env.reader("ttl", Position(By.DLSN, DLSN(3, 0, 0)))
        writer = await env.writer("ttl")
        again = await writer.write(Record(b"after expiry"))
        await writer.close()
        assert again.seq == RECORDS and again.dlsn.segment > before[-1].segment.sequence
        tail = await read_all(await env.reader("ttl", follow=False))
        assert [r.payload for r in tail] == [b"after expiry"]


async def test_a_lost_ledger_is_reported_as_a_gap_with_its_range(cluster: Cluster) -> None:
    async with stream_env(cluster, "us-west", fresh_namespace()) as env:
        written = await write_multisegment(env, "lost")
        segments = await env.streams.segments("lost")
        lost = segments[2].segment
        await env.ledgers.delete(lost.ledger_id)
        reader = await env.reader("lost", follow=False)
        got: list[LogRecord] = []
        gaps: list[DataLossError] = []
        async with reader:
            while True:
                try:
                    record = await reader.read_next(timeout_s=30)
                except DataLossError as gap:
                    gaps.append(gap)
                    continue
                if record is None:
                    break
                got.append(record)
        assert len(gaps) == 1
        assert gaps[0].first == str(lost.first_dlsn) and gaps[0].last == str(lost.last_dlsn)
        expected = [w.seq for w in written if w.dlsn.segment != lost.sequence]
        assert [r.seq for r in got] == expected, "the records around the gap, none skipped"


async def test_a_reader_with_an_end_seq_stops_before_the_segment_that_starts_there(
    cluster: Cluster,
) -> None:
    """A producer table's rebuild reads up to the new owner's own segment: the reader ends
    before the first segment starting at or past `end_seq`, without opening its ledger."""
    async with stream_env(cluster, "us-west", fresh_namespace()) as env:
        written = await write_multisegment(env, "e")
        segments = [s.segment for s in await env.streams.segments("e")]
        assert len(segments) >= 3, "the stream spans several segments"
        stop = segments[2]
        opened: list[int] = []
        ledgers_open = env.ledgers.open

        async def spied_open(ledger_id: int, **options: object) -> object:
            opened.append(ledger_id)
            return await ledgers_open(ledger_id, **options)  # type: ignore[arg-type]

        env.ledgers.open = spied_open  # type: ignore[assignment,method-assign]
        reader = await env.reader("e", follow=False, end_seq=stop.first_seq)
        records = await read_all(reader)
        assert [r.seq for r in records] == [w.seq for w in written[: stop.first_seq]]
        assert stop.ledger_id not in opened
        assert opened == [s.ledger_id for s in segments[:2]]
