"""A write proxy's idempotent writes for one owned stream: its producer table, rebuilt from
the stream on first use after the proxy took the stream over, and the writes in flight.

The table is rebuilt lazily, when the first idempotent write arrives, so a takeover (and the
writes that name no producer) never waits for the scan; idempotent writes wait for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from core import runtime
from core.errors import OverCapacityError, ProducerSeqInFlightError, TruncatedPositionError
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient
from reader.log_reader import LogReader, ReaderConfig
from reader.positions import By, Position
from region.idempotence.producers import SCAN_RECORDS, ProducerBudget, ProducerTable
from writer.events import Written

log = logging.getLogger(__name__)
REBUILD_TIMEOUT_S = 60.0
SLOW_REBUILD_S = 1.0  # a rebuild still going after this long says where it is
# Entries read at once by the rebuild's scan: the first idempotent write after a takeover
# waits for it. 1 000 one-record entries took 0.11-0.22 s from a local bookie in batches of
# 32 (the reader's default), 0.06-0.08 s in batches of 128; up to 8 MiB of 64 KiB entries.
REBUILD_READAHEAD_ENTRIES = 128

Key = tuple[int, int]  # (producer id, producer seq)


async def rebuild_table(
    streams: StreamMetaStore,
    ledgers: LedgerClient,
    stream: str,
    upto_seq: int,
    scan_records: int = SCAN_RECORDS,
    budget: ProducerBudget | None = None,
) -> ProducerTable:
    """The producer table of the stream's records before sequence id `upto_seq`, from its
    last `scan_records` records (or all of them, when fewer remain after truncation)."""
    table = ProducerTable(budget=budget)
    if upto_seq == 0 or runtime.broken(runtime.FORGET_PRODUCERS):
        return table
    began = runtime.monotonic()
    scanned = 0
    start = Position(By.SEQ, max(0, upto_seq - scan_records))
    config = ReaderConfig(
        follow=False, end_seq=upto_seq, readahead_entries=REBUILD_READAHEAD_ENTRIES
    )
    at = "opening the reader"

    def slow() -> None:
        log.warning(
            "the producer table of %s is still being rebuilt after %.1f s: %d records "
            "scanned of seq %d..%d, %s", stream, runtime.monotonic() - began, scanned,
            start.value, upto_seq, at,
        )  # fmt: skip

    watch = asyncio.get_running_loop().call_later(SLOW_REBUILD_S, slow)
    try:
        try:
            reader = await LogReader.open(streams, ledgers, stream, start, config)
        except TruncatedPositionError:
            start = Position(By.SEQ, 0)  # what is left of the stream (the log says from 0)
            reader = await LogReader.open(streams, ledgers, stream, Position.earliest(), config)
        at = "reading"
        async with reader:
            async for record in reader:
                if record.seq >= upto_seq:
                    break
                scanned += 1
                at = f"last read {record.dlsn}"
                if record.producer_id is not None and record.producer_seq is not None:
                    written = Written(record.dlsn, record.txid, record.seq)
                    table.record(record.producer_id, record.producer_seq, written)
    finally:
        watch.cancel()
    # an idempotent producer's first write after a takeover waits for this: say how long
    log.info(
        "rebuilt the producer table of %s from its last %d records in %.3f s",
        stream, scanned, runtime.monotonic() - began,
    )  # fmt: skip
    return table


class Idempotence:
    """One owned stream's producer table and its idempotent writes in flight."""

    def __init__(self, build: Callable[[], Coroutine[Any, Any, ProducerTable]]) -> None:
        self._build = build
        self._building: asyncio.Task[ProducerTable] | None = None
        self._inflight: set[Key] = set()

    async def table(self) -> ProducerTable:
        if self._building is None:
            self._building = asyncio.get_running_loop().create_task(self._build())
        try:
            async with asyncio.timeout(REBUILD_TIMEOUT_S):
                return await asyncio.shield(self._building)
        except TimeoutError:
            raise OverCapacityError(
                f"rebuilding the stream's producer table from its last records took over "
                f"{REBUILD_TIMEOUT_S:.0f} s; retry"
            ) from None
        except Exception:
            self._building = None  # the next idempotent write tries again
            raise

    async def write_once(
        self,
        keys: Sequence[Key],
        write: Callable[[list[int]], Awaitable[list[Written]]],
    ) -> tuple[list[Written], int]:
        """Writes the records of `keys` that have not landed yet (`write` gets their indices
        and returns where they landed); (where every one of them is, how many had landed)."""
        table = await self.table()
        landed = [table.lookup(producer, seq) for producer, seq in keys]
        todo = [i for i, where in enumerate(landed) if where is None]
        busy = [keys[i] for i in todo if keys[i] in self._inflight]
        if busy:
            producer, seq = busy[0]
            raise ProducerSeqInFlightError(
                f"producer {producer:#x} seq {seq} is being written by an earlier request; "
                "retry to get where it landed"
            )
        if todo:
            claimed = [keys[i] for i in todo]
            self._inflight.update(claimed)
            try:
                results = await write(todo)
                for index, where in zip(todo, results, strict=True):
                    table.record(*keys[index], where)
                    landed[index] = where
            finally:
                self._inflight.difference_update(claimed)
        return [where for where in landed if where is not None], len(keys) - len(todo)

    def close(self) -> None:
        building = self._building
        if building is None:
            return
        if not building.done():
            building.cancel()
        elif not building.cancelled() and building.exception() is None:
            building.result().close()  # its acks leave the proxy's budget
