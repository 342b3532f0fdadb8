"""Catch-up reads of entry ranges with batched reads: many consecutive entries per request.

Used when every bookie of the ensemble holds every entry (ensemble size = write quorum, as
globelog's shipped replication has), where one bookie can answer a whole run. A range is cut
into batches that stay inside one ensemble and hold at most `BATCH_ENTRIES_MAX` entries; a few
batches are in flight at once. Each batch asks the bookies in placement's read order; a bookie
that fails, lacks the first entry or sends a corrupt one passes the batch to the next, and a
short answer (the bookie's size bound, or a gap it lacks) is continued from where it stopped.
When no bookie serves the next entry, the rest of that batch takes the per-entry path
(speculative reads, many in flight, and its definite errors: missing, unavailable), which is
also what a bookie older than 4.17 (it closes a connection on a batched read) comes to.

Bounds: a batched read waits at most the connect timeout and `read_timeout_s` per bookie it
tries, at most the write set; then the per-entry path's own bounds apply. Only a corrupt copy
counts against a bookie's health here: the other failures are the v2 connection's, and the
per-entry path records what it finds of the bookies themselves.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Awaitable, Callable, Sequence

from core.errors import GlobelogError
from ledger.codecs.entry import EntryCodec
from ledger.codecs.metadata import LedgerMetadata
from ledger.drivers.context import LedgerContext

BATCH_ENTRIES_MAX = 512  # entries asked for per batched read
# Response bytes asked for per batched read: a whole frame must arrive within the read
# timeout, or the connection counts as stalled (1 MiB takes 0.1 s at 10 MB/s).
BATCH_BYTES_MAX = 1024 * 1024
BATCHES_IN_FLIGHT_MAX = 4  # batched reads in flight per range

# (first, last) -> payloads of entries first..last: the per-entry path, many in flight
ReadSingly = Callable[[int, int], Awaitable[list[bytes]]]


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
    read_singly: ReadSingly,
) -> list[bytes]:
    """Payloads of entries first..last in order; the errors of `read_singly` where it is used."""
    firsts = [ensemble.first_entry_id for ensemble in metadata.ensembles]
    payloads: list[bytes] = [b""] * (last - first + 1)
    slots = asyncio.Semaphore(BATCHES_IN_FLIGHT_MAX)

    async def one_batch(low: int, high: int) -> None:
        async with slots:
            while low <= high:
                got = await _from_any_bookie(context, ledger_id, metadata, codec, low, high)
                if not got:
                    got = await read_singly(low, high)
                payloads[low - first : low - first + len(got)] = got
                low += len(got)

    batches = [
        asyncio.ensure_future(one_batch(lo, hi)) for lo, hi in plan_batches(firsts, first, last)
    ]
    # Not an asyncio.TaskGroup: on Python 3.11 its error wins over our caller's cancellation,
    # and a child failing while it waits leaves our task's cancel count raised, which turns
    # a later asyncio.timeout of the caller into a cancellation instead of a TimeoutError.
    try:
        await asyncio.gather(*batches)
    except BaseException:
        # The first batch's error (as the per-entry path raises it), once the others have
        # stopped; a cancellation of our caller meanwhile wins over it.
        for batch in batches:
            batch.cancel()
        await asyncio.gather(*batches, return_exceptions=True)
        raise
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
    order = context.read_order(metadata.write_set(low), started_s)
    for bookie in order:
        try:
            packets = await context.bookies.batch_read(
                bookie,
                ledger_id,
                low,
                high - low + 1,
                BATCH_BYTES_MAX,
                timeout_s=context.config.read_timeout_s,
            )
        except GlobelogError:
            continue  # the next bookie; what the bookie itself is worth, single reads learn
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
