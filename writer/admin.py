"""Stream administration: create, delete, describe, truncate, and TTL retention.

Truncation marks segments (metadata only); retention deletes completed segments whose
completion is older than the TTL, oldest first, each one metadata first and then its ledger
(a ledger without metadata is garbage the bookies collect; the reverse would leave metadata
pointing at nothing). Every change is a compare-and-set; a lost race raises, it never
retries blindly.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any

from core import runtime
from core.dlsn import DLSN
from core.errors import InvalidRecordError
from core.segments import ArchiveRef, SegmentMetadata, Truncation
from global_meta.streams import StreamMetaStore, VersionedSegment
from ledger import LedgerClient, NoSuchLedgerMetadataError

ADMIN_OWNER = "globelog-admin"


def describe_segment(segment: SegmentMetadata) -> dict[str, Any]:
    return {
        "sequence": segment.sequence,
        "ledger_id": segment.ledger_id,
        "state": segment.state.value,
        "truncation": segment.truncation.value,
        "first_dlsn": str(segment.first_dlsn),
        "last_dlsn": None if segment.last_dlsn is None else str(segment.last_dlsn),
        "min_active": None if segment.min_active is None else str(segment.min_active),
        "first_txid": segment.first_txid,
        "last_txid": None if segment.is_in_progress else segment.last_txid,
        "first_seq": segment.first_seq,
        "record_count": None if segment.is_in_progress else segment.record_count,
        "created_ms": segment.created_ms,
        "completed_ms": segment.completed_ms or None,
        "writer_region": segment.writer_region,
        "end_of_stream": segment.end_of_stream,
        "archive": None if segment.archive is None else segment.archive.uri,
        "ledger_deleted": segment.ledger_deleted,
    }


async def describe_stream(streams: StreamMetaStore, stream: str) -> dict[str, Any]:
    await streams.require(stream)
    segments = [v.segment for v in await streams.segments(stream)]
    counters = await streams.counters(stream)
    completed = [s for s in segments if not s.is_in_progress]
    return {
        "namespace": streams.namespace,
        "stream": stream,
        "created_ms": await streams.created_ms(stream),
        "owner": await streams.owner(stream),
        "segments": len(segments),
        "in_progress": [s.sequence for s in segments if s.is_in_progress],
        "records_in_completed_segments": sum(s.record_count for s in completed),
        "max_txid": counters.max_txid,
        "max_segment_sequence": counters.max_sequence,
        "end_of_stream": any(s.end_of_stream for s in segments),
    }


async def delete_stream(streams: StreamMetaStore, ledgers: LedgerClient, stream: str) -> int:
    """Deletes the stream, every segment ledger first; refuses while a writer owns it.

    Returns how many ledgers were deleted.
    """
    lock = await streams.acquire(stream, ADMIN_OWNER, "admin", 0.0)
    try:
        deleted = 0
        for versioned in await streams.segments(stream):
            with contextlib.suppress(NoSuchLedgerMetadataError):
                await ledgers.delete(versioned.segment.ledger_id)
                deleted += 1
    except BaseException:
        await streams.release(lock)
        raise
    await streams.delete_stream_metadata(stream)  # the lock node goes with the tree
    return deleted


@dataclass(frozen=True, slots=True)
class TruncateResult:
    truncated: tuple[int, ...]  # segments now wholly truncated
    partial: int | None  # the segment now partially truncated, if any
    skipped_in_progress: int | None  # an in-progress segment that holds the DLSN


async def truncate(streams: StreamMetaStore, stream: str, to: DLSN) -> TruncateResult:
    """Marks every record before `to` truncated: readers may no longer start before it.

    Only completed segments change (the writer owns the in-progress one's metadata); a DLSN
    inside the in-progress segment truncates every earlier segment.
    """
    await streams.require(stream)
    segments = await streams.segments(stream)
    truncated: list[int] = []
    partial = skipped = None
    for versioned in segments:
        segment = versioned.segment
        if segment.sequence > to.segment or segment.truncation is Truncation.TRUNCATED:
            continue
        if segment.is_in_progress:
            skipped = segment.sequence if segment.sequence == to.segment else None
            continue
        last = segment.last_dlsn
        if segment.sequence < to.segment or last is None or last < to:
            await streams.update_segment(
                stream,
                versioned,
                replace(segment, truncation=Truncation.TRUNCATED, min_active=None),
            )
            truncated.append(segment.sequence)
        elif to > segment.first_dlsn and (segment.min_active is None or to > segment.min_active):
            marked = replace(segment, truncation=Truncation.PARTIALLY_TRUNCATED, min_active=to)
            await streams.update_segment(stream, versioned, marked)
            partial = segment.sequence
    return TruncateResult(tuple(truncated), partial, skipped)


@dataclass(frozen=True, slots=True)
class RetentionResult:
    expired: tuple[SegmentMetadata, ...]  # deleted (or, in a dry run, to be deleted)
    kept: int
    dry_run: bool
    # With an archive required: the first expired segment not archived yet (retention stops
    # there until `globelog spark archive` copies it), or None.
    waiting_for_archive: int | None = None


async def apply_retention(
    streams: StreamMetaStore,
    ledgers: LedgerClient,
    stream: str,
    ttl_s: float,
    *,
    dry_run: bool = False,
    now_ms: int | None = None,
    archive_required: bool = False,
) -> RetentionResult:
    """Deletes completed segments completed more than `ttl_s` ago, oldest first, stopping at
    the first segment that is newer or in progress (so no hole opens in the middle).

    With `archive_required` (the topology configures an archive), only archived segments
    expire, and only their ledgers go: the segment is marked `ledger_deleted` first (readers
    turn to its archive), then its ledger is deleted. Retention stops at the first expired
    segment that is not archived yet.
    """
    if ttl_s <= 0:
        raise InvalidRecordError(f"retention TTL is {ttl_s} s; expected > 0")
    await streams.require(stream)
    cutoff_ms = (now_ms if now_ms is not None else runtime.wall_ms()) - int(ttl_s * 1000)
    segments = await streams.segments(stream)
    expired: list[VersionedSegment] = []
    waiting = None
    for versioned in segments:
        segment = versioned.segment
        if segment.is_in_progress or segment.completed_ms > cutoff_ms:
            break
        if archive_required and segment.ledger_deleted:
            continue  # expired earlier: only its archive is left
        if archive_required and segment.archive is None:
            waiting = segment.sequence
            break
        expired.append(versioned)
    if not dry_run:
        for versioned in expired:
            if archive_required:
                deleted = replace(versioned.segment, ledger_deleted=True)
                await streams.update_segment(stream, versioned, deleted)
            else:
                await streams.delete_segment(stream, versioned)
            with contextlib.suppress(NoSuchLedgerMetadataError):
                await ledgers.delete(versioned.segment.ledger_id)
    kept = len(segments) - len(expired)
    return RetentionResult(tuple(v.segment for v in expired), kept, dry_run, waiting)


async def mark_archived(
    streams: StreamMetaStore, stream: str, sequence: int, archive: ArchiveRef
) -> SegmentMetadata:
    """Records a completed segment's checked Parquet copy in its metadata (compare-and-set)."""
    versioned = await streams.segment(stream, sequence)
    if versioned is None:
        raise InvalidRecordError(f"stream {stream!r} has no segment {sequence} to mark archived")
    segment = versioned.segment
    if segment.is_in_progress:
        raise InvalidRecordError(
            f"stream {stream!r} segment {sequence} is in progress; only completed segments "
            "are archived"
        )
    marked = replace(segment, archive=archive)
    await streams.update_segment(stream, versioned, marked)
    return marked
