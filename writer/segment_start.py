"""Starting a segment: the owner's new epoch (a ledger, then its metadata in one multi-op)."""

from __future__ import annotations

import contextlib
import time

from core.errors import GlobelogError
from core.segments import SegmentMetadata, SegmentState
from core.streams import LEDGER_SEGMENT_KEY, LEDGER_STREAM_KEY
from core.topology import Replication
from global_meta.streams import OwnerLock, StreamMetaStore, VersionedSegment
from ledger import LedgerClient, LedgerWriter


def now_ms() -> int:
    return int(time.time() * 1000)


async def start_segment(
    streams: StreamMetaStore,
    ledgers: LedgerClient,
    stream: str,
    replication: Replication,
    region: str,
    lock: OwnerLock,
) -> tuple[VersionedSegment, LedgerWriter, int]:
    """Creates the next segment's ledger and metadata: the owner's new epoch.

    Its first sequence id and txid floor come from the stream's counters, which every
    completion moved past the previous segment (and which outlive segments deleted by
    retention)."""
    counters = await streams.counters(stream)
    sequence = counters.max_sequence + 1
    custom = ((LEDGER_STREAM_KEY, stream.encode()), (LEDGER_SEGMENT_KEY, str(sequence).encode()))
    ledger = await ledgers.create(replication, custom_metadata=custom)
    segment = SegmentMetadata(
        sequence=sequence,
        ledger_id=ledger.ledger_id,
        state=SegmentState.IN_PROGRESS,
        first_txid=max(counters.max_txid, 0),
        first_seq=counters.next_seq,
        created_ms=now_ms(),
        writer_region=region,
    )
    try:
        versioned = await streams.start_segment(stream, segment, counters, lock)
    except BaseException:
        await ledger.abandon()
        with contextlib.suppress(GlobelogError):
            await ledgers.delete(ledger.ledger_id)
        raise
    return versioned, ledger, counters.max_txid
