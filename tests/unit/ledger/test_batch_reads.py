"""read_batched's driver decisions with stand-in bookies (the real ones: tests/integration/ledger/
test_bookie_client.py and test_ledger_client.py): where it falls back, that it ends, and
that a cancelled caller is cancelled."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from ledger.codecs.entry import DigestType, EntryCodec
from ledger.codecs.metadata import Ensemble, LedgerMetadata, LedgerState
from ledger.drivers.batch_reads import read_batched
from ledger.drivers.telemetry import LedgerMetrics
from ledger.errors import ConnectionLostError, EntryMissingError

LEDGER = 42
PASSWORD = b"pw"
BOOKIES = ("b1:1", "b2:1", "b3:1")
METADATA = LedgerMetadata(
    3,
    3,
    2,
    (Ensemble(0, BOOKIES), Ensemble(10, BOOKIES)),  # two ensembles: two batches for 0..19
    DigestType.CRC32C,
    PASSWORD,
    LedgerState.CLOSED,
    19,
)
CODEC = EntryCodec(LEDGER, DigestType.CRC32C, PASSWORD)


def _payload(entry_id: int) -> bytes:
    return f"entry {entry_id}".encode()


def _context(batch_read: Any) -> Any:
    placement = SimpleNamespace(read_order=lambda write_set, now_s: tuple(write_set))
    return SimpleNamespace(
        bookies=SimpleNamespace(batch_read=batch_read),
        placement=placement,
        read_order=placement.read_order,  # LedgerContext.read_order, with no bookie silent
        config=SimpleNamespace(read_timeout_s=1.0),
        clock=lambda: 0.0,
        metrics=LedgerMetrics.create(),
    )


async def test_a_batch_no_bookie_serves_is_read_singly_as_one_range() -> None:
    tried: list[str] = []

    async def batch_read(bookie: str, *args: Any, **kwargs: Any) -> tuple[bytes, ...]:
        tried.append(bookie)
        raise ConnectionLostError(f"bookie {bookie}: closed the connection")  # a pre-4.17 bookie

    singly: list[tuple[int, int]] = []

    async def read_singly(first: int, last: int) -> list[bytes]:
        singly.append((first, last))
        return [_payload(e) for e in range(first, last + 1)]

    got = await asyncio.wait_for(
        read_batched(_context(batch_read), LEDGER, METADATA, CODEC, 0, 19, read_singly), 5
    )
    assert got == [_payload(e) for e in range(20)]
    assert sorted(singly) == [(0, 9), (10, 19)]  # whole batches, not entry by entry
    assert sorted(tried) == sorted(BOOKIES * 2)  # every bookie once per batch, then single reads


async def test_a_short_answer_continues_where_it_stopped() -> None:
    asked: list[int] = []

    async def batch_read(
        bookie: str, ledger_id: int, low: int, count: int, *args: Any, **kwargs: Any
    ) -> tuple[bytes, ...]:
        asked.append(low)
        high = min(low + 3, low + count)  # three entries at most per answer
        return tuple(CODEC.encode_entry(e, e - 1, 0, _payload(e)) for e in range(low, high))

    async def read_singly(first: int, last: int) -> list[bytes]:
        raise AssertionError("every entry is served by batches")

    got = await read_batched(_context(batch_read), LEDGER, METADATA, CODEC, 2, 12, read_singly)
    assert got == [_payload(e) for e in range(2, 13)]
    assert sorted(asked) == [2, 5, 8, 10]  # 2..9 in threes, then the second ensemble's 10..12


async def test_a_cancelled_caller_is_cancelled_even_while_a_batch_fails() -> None:
    async def batch_read(bookie: str, *args: Any, **kwargs: Any) -> tuple[bytes, ...]:
        raise ConnectionLostError("v2 connection lost")

    failed, waiting = asyncio.Event(), asyncio.Event()

    async def read_singly(first: int, last: int) -> list[bytes]:
        if first == 0:
            failed.set()
            raise EntryMissingError(f"ledger {LEDGER}: entry 0 is on no bookie")
        try:
            waiting.set()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # slow to stop: the caller is cancelled meanwhile
            raise
        return []

    reading = asyncio.ensure_future(
        read_batched(_context(batch_read), LEDGER, METADATA, CODEC, 0, 19, read_singly)
    )
    # the first batch has failed; the group waits for the second
    await asyncio.wait_for(asyncio.gather(failed.wait(), waiting.wait()), 5)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(reading, 5)


async def test_the_first_error_is_raised_as_the_per_entry_path_raises_it() -> None:
    async def batch_read(bookie: str, *args: Any, **kwargs: Any) -> tuple[bytes, ...]:
        raise ConnectionLostError("v2 connection lost")

    async def read_singly(first: int, last: int) -> list[bytes]:
        raise EntryMissingError(f"ledger {LEDGER}: entries {first}..{last} are on no bookie")

    with pytest.raises(EntryMissingError, match="are on no bookie"):
        await asyncio.wait_for(
            read_batched(_context(batch_read), LEDGER, METADATA, CODEC, 0, 19, read_singly), 5
        )
