"""What stops a LogReader reaches its caller as it is: a bug is raised, never passed off as the
end of the stream, and a segment watch that fails ends the reader instead of leaving it
waiting for ever. An empty stream's metadata is faked at the StreamMetaStore seam."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any, cast

import pytest

from core.errors import EndOfStreamError, MetadataUnavailableError
from global_meta.streams import StreamCounters, VersionedSegment
from reader.log_reader import LogReader, ReaderConfig

WAIT_S = 5.0  # an answer the reader must give at once; bounds the test if it does not


class EmptyStream:
    """A stream with no segment yet; listing its segments fails as told after the first."""

    def __init__(self, listing_error: Exception | None, watch_error: Exception | None) -> None:
        self.listing_error = listing_error
        self.watch_error = watch_error
        self.listings = 0

    async def require(self, stream: str) -> None:
        pass

    async def segments(self, stream: str) -> list[VersionedSegment]:
        self.listings += 1
        if self.listings > 1 and self.listing_error is not None:
            raise self.listing_error
        return []

    async def counters(self, stream: str) -> StreamCounters:
        return StreamCounters(0, 0, 0, 0, 0)

    async def watch_segments(self, stream: str) -> AsyncGenerator[list[str], None]:
        yield []
        if self.watch_error is not None:
            raise self.watch_error
        await asyncio.Event().wait()  # no change, ever


async def open_reader(stream: EmptyStream) -> LogReader:
    return await LogReader.open(
        cast(Any, stream), cast(Any, None), "s0", config=ReaderConfig(follow=True)
    )


async def test_a_bug_in_the_read_ahead_is_raised_as_it_is() -> None:
    reader = await open_reader(EmptyStream(KeyError("segment 7"), None))
    async with reader:
        with pytest.raises(KeyError, match="segment 7"):
            await reader.read_next(timeout_s=WAIT_S)
        assert await reader.read_next() is None, "a failed reader has ended"


async def test_a_failed_segment_watch_ends_a_tailing_reader_with_its_error() -> None:
    stream = EmptyStream(None, MetadataUnavailableError("no ZooKeeper session"))
    reader = await open_reader(stream)
    async with reader:
        with pytest.raises(MetadataUnavailableError, match="no ZooKeeper session"):
            await reader.read_next(timeout_s=WAIT_S)


async def test_an_operating_error_is_not_an_end_of_stream() -> None:
    stream = EmptyStream(MetadataUnavailableError("no ZooKeeper session"), None)
    reader = await open_reader(stream)
    async with reader:
        with pytest.raises(MetadataUnavailableError) as raised:
            await reader.read_next(timeout_s=WAIT_S)
    assert not isinstance(raised.value, EndOfStreamError)
