"""Catch-up reads of entry ranges with batched reads: many consecutive entries per request.

Used when every bookie of the ensemble holds every entry (ensemble size = write quorum, as
globelog's shipped replication has), where one bookie can answer a whole run. A range is cut
into batches that stay inside one ensemble and hold at most `BATCH_ENTRIES_MAX` entries; a few
batches are in flight at once. Each batch asks the bookies in placement's read order; a bookie
that fails, lacks the first entry or sends a corrupt one passes the batch to the next, and a
short answer (the bookie's size bound, or a gap it lacks) is continued from where it stopped.
When no bookie serves the next entry, that one entry takes the per-entry path (speculative
reads, and its definite errors: missing, unavailable), and batching resumes after it.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Awaitable, Callable, Sequence

from core.errors import GlobelogError
from ledger.context import LedgerContext
from ledger.entry import EntryCodec
from ledger.errors import NoSuchEntryError, NoSuchLedgerError
from ledger.metadata import LedgerMetadata

BATCH_ENTRIES_MAX = 512  # entries asked for per batched read
BATCH_BYTES_MAX = 2 * 1024 * 1024  # response bytes asked for per batched read
BATCHES_IN_FLIGHT_MAX = 4  # batched reads in flight per range

ReadOne = Callable[[int], Awaitable[bytes]]  # entry id -> payload, the per-entry path


def can_batch(metadata: LedgerMetadata) -> bool:
    """Whether one bookie holds every entry of the ledger (no striping)."""
    return metadata.ensemble_size == metadata.write_quorum


def plan_batches(
    ensemble_firsts: Sequence[int], first: int, last: int, entries_max: int = BATCH_ENTRIES_MAX
) -> list[tuple[int, int]]:
    """Entries first..last (inclusive) as (low, high) batches: each inside one ensemble (whose
    first entry ids are `ensemble_firsts`, ascending) and of at most `entries_max` entries."""
    assert 0 <= first <= last and entries_max > 0, (first, last, entries_max)
    batches = []
    low = first
    while low <= last:
        index = bisect.bisect_right(ensemble_firsts, low)
        ensemble_end = ensemble_firsts[index] - 1 if index < len(ensemble_firsts) else last
        high = min(last, ensemble_end, low + entries_max - 1)
        batches.append((low, high))
        low = high + 1
    return batches


async def read_batched(
    context: LedgerContext,
    ledger_id: int,
    metadata: LedgerMetadata,
    codec: EntryCodec,
    first: int,
    last: int,
    read_one: ReadOne,
) -> list[bytes]:
    """Payloads of entries first..last in order; the errors of `read_one` where it is used."""
    firsts = [ensemble.first_entry_id for ensemble in metadata.ensembles]
    payloads: list[bytes] = [b""] * (last - first + 1)
    slots = asyncio.Semaphore(BATCHES_IN_FLIGHT_MAX)

    async def one_batch(low: int, high: int) -> None:
        async with slots:
            while low <= high:
                got = await _from_any_bookie(context, ledger_id, metadata, codec, low, high)
                if not got:
                    got = [await read_one(low)]
                payloads[low - first : low - first + len(got)] = got
                low += len(got)

    try:
        async with asyncio.TaskGroup() as group:
            for low, high in plan_batches(firsts, first, last):
                group.create_task(one_batch(low, high))
    except BaseExceptionGroup as failed:
        # The first batch's error, as the per-entry path would raise it; the others stopped.
        raise failed.exceptions[0] from None
    return payloads


async def _from_any_bookie(
    context: LedgerContext,
    ledger_id: int,
    metadata: LedgerMetadata,
    codec: EntryCodec,
    low: int,
    high: int,
) -> list[bytes]:
    """Payloads of entries low.. (at least one) from the first bookie that serves them; empty
    when none does."""
    started_s = context.clock()
    order = context.placement.read_order(metadata.write_set(low), started_s)
    for bookie in order:
        try:
            packets = await context.bookies.batch_read(
                bookie, ledger_id, low, high - low + 1, BATCH_BYTES_MAX
            )
        except (NoSuchEntryError, NoSuchLedgerError):
            continue  # a definite answer about the data, not about the bookie's health
        except GlobelogError:
            context.placement.record_failure(bookie, context.clock())
            continue
        payloads = _verified_prefix(codec, low, packets)
        if len(payloads) < len(packets):
            context.placement.record_failure(bookie, context.clock())
        if payloads:
            context.metrics.batch_read_latency.record(context.clock() - started_s)
            context.metrics.batch_read_entries.add(len(payloads))
            return payloads
    return []


def _verified_prefix(codec: EntryCodec, low: int, packets: Sequence[bytes]) -> list[bytes]:
    """The payloads of `packets` (entries low, low + 1, ...) up to the first that fails its
    digest or names another entry."""
    payloads = []
    for offset, packet in enumerate(packets):
        try:
            payloads.append(codec.decode_entry(packet, low + offset).payload)
        except GlobelogError:
            break
    return payloads
