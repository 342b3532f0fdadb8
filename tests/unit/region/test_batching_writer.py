"""BatchingWriter: every write's future ends, with its acknowledgement or its batch's error,
whatever that error is (a non-globelog one left them pending for ever)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

import pytest

from core.dlsn import DLSN
from core.errors import MetadataUnavailableError
from region.client import Acked, BatchingWriter


class FakeClient:
    """Answers bulk writes as told: acknowledgements, an error, or nothing until released."""

    def __init__(self, error: BaseException | None = None, short_by: int = 0) -> None:
        self.error = error
        self.short_by = short_by
        self.release: asyncio.Event | None = None

    async def write_bulk(self, stream: str, payloads: Sequence[bytes]) -> list[Acked]:
        if self.release is not None:
            await self.release.wait()
        if self.error is not None:
            raise self.error
        count = len(payloads) - self.short_by
        return [Acked(DLSN(1, i, 0), i, i) for i in range(count)]


def batching(client: FakeClient) -> BatchingWriter:
    return BatchingWriter(cast(Any, client), "s0", max_records=2)


@pytest.mark.parametrize(
    "error",
    [
        MetadataUnavailableError("no ZooKeeper session"),
        ValueError("a bug"),
        ConnectionResetError("peer went away"),
    ],
    ids=["globelog", "bug", "foreign"],
)
async def test_every_future_of_a_failed_batch_ends_with_its_error(error: Exception) -> None:
    writer = batching(FakeClient(error))
    futures = [writer.write(b"a"), writer.write(b"b"), writer.write(b"c")]
    await writer.flush()
    for future in futures:
        assert future.done()
        assert future.exception() is error


async def test_a_batch_answered_short_fails_its_writes_instead_of_leaving_them() -> None:
    writer = batching(FakeClient(short_by=1))
    futures = [writer.write(b"a"), writer.write(b"b")]
    await writer.flush()
    for future in futures:
        with pytest.raises(Exception, match="2 records sent, 1 acknowledged"):
            future.result()


async def test_acknowledged_writes_resolve_in_order() -> None:
    writer = batching(FakeClient())
    futures = [writer.write(p) for p in (b"a", b"b", b"c")]
    await writer.flush()
    assert [f.result().seq for f in futures] == [0, 1, 0]


async def test_a_cancelled_flush_leaves_the_sends_running() -> None:
    client = FakeClient()
    client.release = asyncio.Event()
    writer = batching(client)
    future = writer.write(b"a")
    flushing = asyncio.create_task(writer.flush())
    await asyncio.sleep(0)  # the flush now waits on the send
    flushing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flushing
    client.release.set()
    assert (await future).seq == 0


async def test_batches_go_one_at_a_time_in_the_order_of_the_writes() -> None:
    """Two batches in flight at once travel on two connections: the later one, smaller, once
    reached the proxy first and took the earlier's sequence ids (seen in a full run under
    load: acknowledgements 0..999 then 1500..). The next batch is sent once the one before is
    answered, whatever its outcome."""
    sent: list[list[bytes]] = []
    first_answered = asyncio.Event()

    class Ordered:
        async def write_bulk(self, stream: str, payloads: Sequence[bytes]) -> list[Acked]:
            sent.append(list(payloads))
            if len(sent) == 1:
                await asyncio.sleep(0.05)  # the first batch is the slow one
                first_answered.set()
                raise ConnectionResetError("the first batch failed")
            assert first_answered.is_set(), "the second batch was sent before the first ended"
            base = sum(len(s) for s in sent[:-1])
            return [Acked(DLSN(1, base + i, 0), base + i, base + i) for i in range(len(payloads))]

    writer = BatchingWriter(cast(Any, Ordered()), "s0", max_records=2)
    futures = [writer.write(p) for p in (b"a", b"b", b"c")]
    await writer.flush()
    assert sent == [[b"a", b"b"], [b"c"]]
    assert all(isinstance(f.exception(), ConnectionResetError) for f in futures[:2])
    assert futures[2].result().seq == 2
