"""Segment metadata: what ZooKeeper stores about each segment of a stream, and its format.

A segment is a contiguous piece of a stream held in one ledger. Its metadata is one znode's
data, JSON with a format version (docs/metadata.md), rewritten only by compare-and-set:
  in progress -> completed (by its writer on roll or close, or by the next owner's recovery)
  truncation: active -> partially truncated (min_active set) -> truncated.
  tiering: in the bookies -> archived (a Parquet copy recorded, ledger kept) -> archived only
           (the ledger deleted by retention; readers read the archive).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, replace
from typing import Any

from core.dlsn import DLSN
from core.errors import InvalidDlsnError, SegmentMetadataError

SEGMENT_FORMAT_VERSION = 1


class SegmentState(enum.Enum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


class Truncation(enum.Enum):
    ACTIVE = "active"
    PARTIALLY_TRUNCATED = "partially_truncated"  # records before min_active are gone
    TRUNCATED = "truncated"  # every record is gone (or about to be)


@dataclass(frozen=True, slots=True)
class ArchiveRef:
    """Where a completed segment's records were copied (globelog spark archive): a Parquet
    dataset (a directory or a Hadoop filesystem URI) holding `records` rows."""

    uri: str
    records: int
    archived_ms: int


@dataclass(frozen=True, slots=True)
class SegmentMetadata:
    """One segment. `first_seq` is the sequence id of its first record (dense, stream-wide).

    While in progress only the start fields hold; completion fills last_txid, last_dlsn,
    record_count and completed_ms. `last_dlsn` None on a completed segment means it is empty.
    """

    sequence: int
    ledger_id: int
    state: SegmentState
    first_txid: int  # the stream's max txid when it started: no record in it is below this
    first_seq: int
    created_ms: int
    writer_region: str
    last_txid: int = -1
    last_dlsn: DLSN | None = None
    record_count: int = 0
    completed_ms: int = 0
    end_of_stream: bool = False
    truncation: Truncation = Truncation.ACTIVE
    min_active: DLSN | None = None  # partially truncated: the first DLSN still readable
    archive: ArchiveRef | None = None  # a copy in cold storage
    ledger_deleted: bool = False  # the bookies no longer hold it: only the archive does

    @property
    def archived_only(self) -> bool:
        """True when the segment's records are read from its archive, not the bookies."""
        return self.ledger_deleted and self.archive is not None

    @property
    def is_in_progress(self) -> bool:
        return self.state is SegmentState.IN_PROGRESS

    @property
    def first_dlsn(self) -> DLSN:
        return DLSN(self.sequence, 0, 0)

    @property
    def next_seq(self) -> int:
        """The sequence id of the record after this (completed) segment's last one."""
        assert not self.is_in_progress, self
        return self.first_seq + self.record_count

    def completed(
        self, last_txid: int, last_dlsn: DLSN | None, record_count: int, now_ms: int, eos: bool
    ) -> SegmentMetadata:
        assert self.is_in_progress, self
        return replace(
            self,
            state=SegmentState.COMPLETED,
            last_txid=max(last_txid, self.first_txid) if record_count else self.first_txid,
            last_dlsn=last_dlsn,
            record_count=record_count,
            completed_ms=now_ms,
            end_of_stream=eos,
        )


def encode_segment(segment: SegmentMetadata) -> bytes:
    body: dict[str, Any] = {
        "version": SEGMENT_FORMAT_VERSION,
        "sequence": segment.sequence,
        "ledger_id": segment.ledger_id,
        "state": segment.state.value,
        "first_txid": segment.first_txid,
        "first_seq": segment.first_seq,
        "created_ms": segment.created_ms,
        "writer_region": segment.writer_region,
        "truncation": segment.truncation.value,
    }
    if not segment.is_in_progress:
        body |= {
            "last_txid": segment.last_txid,
            "last_dlsn": None if segment.last_dlsn is None else str(segment.last_dlsn),
            "record_count": segment.record_count,
            "completed_ms": segment.completed_ms,
            "end_of_stream": segment.end_of_stream,
        }
    if segment.min_active is not None:
        body["min_active"] = str(segment.min_active)
    if segment.archive is not None:
        body["archive"] = {
            "uri": segment.archive.uri,
            "records": segment.archive.records,
            "archived_ms": segment.archive.archived_ms,
        }
    if segment.ledger_deleted:
        body["ledger_deleted"] = True
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def decode_segment(data: bytes, where: str) -> SegmentMetadata:
    """The segment in `data`; SegmentMetadataError naming `where` (its znode) when malformed."""
    try:
        body = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SegmentMetadataError(f"{where}: segment metadata is not JSON: {err}") from err
    if not isinstance(body, dict):
        raise SegmentMetadataError(
            f"{where}: segment metadata is {type(body).__name__}, not an object"
        )
    version = body.get("version")
    if type(version) is not int or version != SEGMENT_FORMAT_VERSION:  # not true, not 1.0
        raise SegmentMetadataError(
            f"{where}: segment format version {version!r}; this globelog reads {SEGMENT_FORMAT_VERSION}"
        )
    try:
        state = SegmentState(body["state"])
        completed = state is SegmentState.COMPLETED
        last = body.get("last_dlsn") if completed else None
        min_active = body.get("min_active")
        return SegmentMetadata(
            sequence=_int(body, "sequence"),
            ledger_id=_int(body, "ledger_id"),
            state=state,
            first_txid=_int(body, "first_txid"),
            first_seq=_int(body, "first_seq"),
            created_ms=_int(body, "created_ms"),
            writer_region=_text(body, "writer_region"),
            last_txid=_int(body, "last_txid") if completed else -1,
            last_dlsn=None if last is None else DLSN.parse(str(last)),
            record_count=_int(body, "record_count") if completed else 0,
            completed_ms=_int(body, "completed_ms") if completed else 0,
            end_of_stream=_flag(body, "end_of_stream"),
            truncation=Truncation(body.get("truncation", "active")),
            min_active=None if min_active is None else DLSN.parse(str(min_active)),
            archive=_archive(body.get("archive")),
            ledger_deleted=_flag(body, "ledger_deleted"),
        )
    except (KeyError, ValueError, InvalidDlsnError) as err:
        raise SegmentMetadataError(
            f"{where}: segment metadata field {err} is missing or invalid"
        ) from err


def _archive(value: Any) -> ArchiveRef | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"'archive'={value!r} (expected an object)")
    return ArchiveRef(_text(value, "uri"), _int(value, "records"), _int(value, "archived_ms"))


def _text(body: dict[str, Any], key: str) -> str:
    value = body[key]
    if not isinstance(value, str):
        raise ValueError(f"{key!r}={value!r} (expected a string)")
    return value


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{key!r}={value!r} (expected true or false)")
    return value


def _int(body: dict[str, Any], key: str) -> int:
    value = body[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{key!r}={value!r} (expected an integer)")
    return value
