"""Records: what a writer appends and a reader receives, with their limits and flags."""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import NamedTuple

from core.dlsn import DLSN, INT64_MAX
from core.errors import InvalidRecordError, RecordTooLargeError

RECORD_BYTES_MAX = 1024 * 1024  # one record's payload
ENTRY_RECORDS_BYTES_MAX = 1024 * 1024  # the records of one entry, before compression
TXID_MAX = INT64_MAX - 1  # INT64_MAX is reserved (DistributedLog's rule)


class RecordFlag(enum.IntFlag):
    NONE = 0
    CONTROL = 0x1  # advances the LAC; never delivered to readers
    END_OF_STREAM = 0x2  # seals the stream; a reader sees the end, not a record
    PRODUCER = 0x4  # an idempotent write: the payload starts with its producer id and seq


KNOWN_FLAGS = RecordFlag.CONTROL | RecordFlag.END_OF_STREAM | RecordFlag.PRODUCER
NO_POSITION = RecordFlag.CONTROL | RecordFlag.END_OF_STREAM  # records that take no sequence id
_PRODUCER = struct.Struct(">QQ")
PRODUCER_PREFIX_BYTES = _PRODUCER.size


def producer_payload(producer: int, seq: int, payload: bytes) -> bytes:
    """The stored payload of an idempotent write: producer id u64 | producer seq u64 | payload."""
    return _PRODUCER.pack(producer, seq) + payload


def split_producer(stored: bytes) -> tuple[int, int, bytes]:
    """(producer id, producer seq, payload) of a PRODUCER record's stored payload; the entry
    decoder has checked that the prefix is there."""
    producer, seq = _PRODUCER.unpack_from(stored)
    return producer, seq, stored[PRODUCER_PREFIX_BYTES:]


@dataclass(frozen=True, slots=True)
class Record:
    """A user record to append. `txid` None lets the writer assign one (time-based)."""

    payload: bytes
    txid: int | None = None
    producer: tuple[int, int] | None = None  # (producer id, producer seq): an idempotent write

    def check(self, stream: str) -> None:
        """Raises the error a writer gives for this record: size and txid range."""
        if len(self.payload) > RECORD_BYTES_MAX:
            raise RecordTooLargeError(
                f"append to stream {stream!r}: record is {len(self.payload)} bytes; "
                f"the limit is {RECORD_BYTES_MAX}"
            )
        if self.txid is not None and not 0 <= self.txid <= TXID_MAX:
            raise InvalidRecordError(
                f"append to stream {stream!r}: txid {self.txid} is outside 0..{TXID_MAX}"
            )


class StoredRecord(NamedTuple):
    """One record as stored in an entry: its txid, flags and payload.

    A named tuple, not a dataclass: one is made per record on the write and read paths.
    """

    txid: int
    flags: RecordFlag
    payload: bytes

    @property
    def is_control(self) -> bool:
        return bool(self.flags & RecordFlag.CONTROL)

    @property
    def is_end_of_stream(self) -> bool:
        return bool(self.flags & RecordFlag.END_OF_STREAM)


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A record as a reader receives it: where it sits in the stream and who wrote it.

    `seq` is its dense sequence id, counted from the stream's first record (0-based) and
    kept across segments; `write_time_ms` and `writer_region` come from its entry.
    """

    dlsn: DLSN
    txid: int
    seq: int
    payload: bytes
    write_time_ms: int
    writer_region: str
    producer_id: int | None = None  # set for idempotent writes
    producer_seq: int | None = None
