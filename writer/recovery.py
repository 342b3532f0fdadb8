"""A new owner's first step: fence and recover each in-progress segment, then complete it.

BookKeeper recovery (through `LedgerClient.open(..., recover_ledger=True)`) fences the ledger
at its bookies, so the former owner's later adds fail, and closes it at the last entry some
ack quorum holds. The segment's metadata is then completed from that entry: its last user
record gives the last DLSN and txid, and its first position gives the record count.
"""

from __future__ import annotations

import logging

from core import runtime
from core.dlsn import DLSN
from core.entry_format import decode_entry, user_record_count
from core.records import NO_POSITION
from core.segments import SegmentMetadata
from global_meta.store import Op
from global_meta.streams import OwnerLock, StreamMetaStore, VersionedSegment
from ledger import LedgerClient, LedgerReader
from writer.events import SegmentSummary

log = logging.getLogger(__name__)


async def summarize(reader: LedgerReader, sequence: int) -> SegmentSummary:
    """The summary of a closed segment ledger, read from its last entries.

    Walks back over trailing control entries (at most a few: a writer sends one only when no
    data entry follows within the flush SLA) to the last entry with user records.
    """
    last_entry = reader.lac
    if last_entry < 0:
        return SegmentSummary(sequence, -1, None, 0, False)
    where = f"segment {sequence} (ledger {reader.ledger_id})"
    tail = decode_entry(await reader.read_entry(last_entry), f"{where} entry {last_entry}")
    record_count = tail.first_position + user_record_count(tail.records)
    end_of_stream = any(r.is_end_of_stream for r in tail.records)
    entry_id, entry = last_entry, tail
    while True:
        slots = [i for i, r in enumerate(entry.records) if not (r.flags and r.flags & NO_POSITION)]
        if slots:
            last = entry.records[slots[-1]]
            dlsn = DLSN(sequence, entry_id, slots[-1])
            return SegmentSummary(sequence, last.txid, dlsn, record_count, end_of_stream)
        if entry_id == 0 or entry.first_position == 0:
            return SegmentSummary(sequence, -1, None, record_count, end_of_stream)
        entry_id -= 1
        entry = decode_entry(await reader.read_entry(entry_id), f"{where} entry {entry_id}")


async def recover_segment(
    streams: StreamMetaStore,
    ledgers: LedgerClient,
    stream: str,
    versioned: VersionedSegment,
    lock: OwnerLock,
) -> VersionedSegment:
    """Fences the in-progress segment's ledger, recovers it, and completes its metadata (the
    ledger's close in the same multi-op)."""
    completed, close = await recovered(streams, ledgers, stream, versioned)
    return await streams.complete_segment(stream, versioned, completed, lock, close)


async def recovered(
    streams: StreamMetaStore, ledgers: LedgerClient, stream: str, versioned: VersionedSegment
) -> tuple[SegmentMetadata, tuple[Op, ...]]:
    """Fences the in-progress segment's ledger and recovers it: the segment's completed
    metadata and the op that closes the ledger, neither written yet. The two go into one
    multi-op (the close alone is a ZooKeeper write across regions); until it commits, the
    ledger stays IN_RECOVERY, which the next owner's recovery finishes."""
    segment = versioned.segment
    assert segment.is_in_progress, segment
    # Unsynced, one leader round trip saved in every takeover. A stale view costs time, never
    # correctness: recovery marks the ledger IN_RECOVERY by compare-and-set, and a conflict
    # (an ensemble change or close the view missed: the last owner's, a rebuilder's) reads
    # the metadata again, synced, and starts over on an ensemble that moved; a stale view
    # cannot show a ledger closed that is not. It is seldom stale: the lock was won through
    # this server, after the last owner's lock node was gone from it. Read through the reads
    # session when there is one (in this process's main one, the read would wait for the
    # writes of the other takes under way: a paused proxy's streams are all taken at once;
    # from a region far from the leader, 0.2 s a write), and through the main one when that
    # session fails, is slow, or does not show the ledger yet.
    began = runtime.monotonic()
    reader, close = await ledgers.recover_for_commit(
        segment.ledger_id, synced=False, read_through=streams.unordered.store
    )
    recovered_s = runtime.monotonic() - began
    summary = await summarize(reader, segment.sequence)
    # the takeover's log gives the recovery's whole time; this splits it (the ledger's
    # recovery, then the reads of its last entries for the segment's summary)
    log.info(
        "recovered segment %d of %s (ledger %d, %d records): ledger recovery %.3f s, "
        "summary %.3f s",
        segment.sequence, stream, segment.ledger_id, summary.record_count, recovered_s,
        runtime.monotonic() - began - recovered_s,
    )  # fmt: skip
    completed = segment.completed(
        summary.last_txid,
        summary.last_dlsn,
        summary.record_count,
        runtime.wall_ms(),
        summary.end_of_stream,
    )
    return completed, () if close is None else (close,)
