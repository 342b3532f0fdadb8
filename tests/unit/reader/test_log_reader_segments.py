"""A LogReader finds every segment: one started while the reader resolves its start is read
from its first record, and one the segment watch does not report is found by the reader's
periodic check. The stream's metadata is faked at the StreamMetaStore seam (as one ZooKeeper
server shows it: a segment and its allocated sequence appear together); the ledger client
only records which ledgers the read-ahead opens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any, cast

import pytest

from core.dlsn import DLSN
from core.segments import SegmentMetadata, SegmentState
from global_meta.streams import StreamCounters, VersionedSegment
from reader import log_reader
from reader.log_reader import LogReader, ReaderConfig
from reader.positions import By, Position

pytestmark = pytest.mark.unit
WAIT_S = 5.0  # bounds a wait that a bug would make endless; never reached when it passes
CHECK_S = 0.05  # the reader's segment check, shortened for the test


def in_progress(sequence: int) -> SegmentMetadata:
    return SegmentMetadata(
        sequence=sequence,
        ledger_id=100 + sequence,
        state=SegmentState.IN_PROGRESS,
        first_txid=0,
        first_seq=0,
        created_ms=0,
        writer_region="us-east",
    )


class Stream:
    """A stream's segments; `started` is started right after the next metadata read, so it
    lands between two reads. The watch reports the list once and no change after it."""

    def __init__(self) -> None:
        self.listed: list[SegmentMetadata] = []
        self.started: SegmentMetadata | None = None
        self.store = object()  # its session, which a ledger's metadata is read through

    def start(self, segment: SegmentMetadata) -> None:
        self.listed.append(segment)

    def _read(self) -> None:
        if self.started is not None:
            self.start(self.started)
            self.started = None

    async def require(self, stream: str) -> None:
        pass

    async def segments(self, stream: str) -> list[VersionedSegment]:
        found = [VersionedSegment(s, 0) for s in self.listed]
        self._read()
        return found

    async def counters(self, stream: str) -> StreamCounters:
        max_sequence = max((s.sequence for s in self.listed), default=0)
        self._read()
        return StreamCounters(max_sequence, 0, -1, 0, 0)

    async def watch_segments(self, stream: str) -> AsyncGenerator[list[str], None]:
        yield [f"{s.sequence:018d}" for s in self.listed]
        await asyncio.Event().wait()  # a change it misses: nothing more, ever


class Ledgers:
    """Records each ledger the read-ahead opens; the open then waits until the reader closes."""

    def __init__(self) -> None:
        self.opened: list[int] = []
        self.synced: list[bool] = []  # per open: was the metadata synced with the leader
        self.opening = asyncio.Event()

    async def open(self, ledger_id: int, *, synced: bool = True, read_through: Any = None) -> Any:
        self.opened.append(ledger_id)
        self.synced.append(synced)
        self.opening.set()
        await asyncio.Event().wait()


async def open_reader(stream: Stream, ledgers: Ledgers, start: Position) -> LogReader:
    return await LogReader.open(
        cast(Any, stream), cast(Any, ledgers), "s0", start, ReaderConfig(follow=True)
    )


async def test_a_segment_started_while_the_reader_opens_is_read_from_its_first_record() -> None:
    stream = Stream()
    stream.started = in_progress(1)
    ledgers = Ledgers()
    reader = await open_reader(stream, ledgers, Position.earliest())
    async with reader:
        assert reader.position == DLSN(1, 0, 0), "the start skipped the new segment"
        async with asyncio.timeout(WAIT_S):
            await ledgers.opening.wait()
        assert ledgers.opened == [101]
        assert ledgers.synced == [True], "a segment being written: its ledger's metadata synced"


async def test_a_completed_segments_ledger_is_opened_without_a_sync() -> None:
    """Its ledger was closed before (or with) its completion, which the reader saw through the
    same ZooKeeper server: no round trip to the leader per segment."""
    stream = Stream()
    stream.start(in_progress(1).completed(5, DLSN(1, 2, 0), 6, 0, False))
    ledgers = Ledgers()
    reader = await open_reader(stream, ledgers, Position.earliest())
    async with reader:
        async with asyncio.timeout(WAIT_S):
            await ledgers.opening.wait()
        assert (ledgers.opened, ledgers.synced) == ([101], [False])


async def test_a_segment_the_watch_does_not_report_is_found_by_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(log_reader, "SEGMENT_CHECK_S", CHECK_S, raising=False)
    stream = Stream()
    ledgers = Ledgers()
    reader = await open_reader(stream, ledgers, Position(By.DLSN, DLSN(1, 0, 0)))
    async with reader:
        await asyncio.sleep(CHECK_S * 3)  # the read-ahead waits for segment 1
        assert ledgers.opened == []
        stream.start(in_progress(1))  # the watch says nothing of it
        async with asyncio.timeout(WAIT_S):
            await ledgers.opening.wait()
        assert ledgers.opened == [101]
