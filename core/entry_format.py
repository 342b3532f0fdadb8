"""globelog's entry format v1: the bytes of one ledger entry, which carries a batch of records.

Bytes in, bytes out (docs/formats.md is the reference; every field is big-endian):

    magic "GL" | version u8 (1) | codec u8 | record count u32 | first position u64 |
    write time ms i64 | raw body length u32 | stored body length u32 |
    region length u8 | region (UTF-8) | body (stored: raw, LZ4 block or Zstandard)

    raw body = count x (txid i64 | flags u16 | payload length u32 | payload)

`first position` is how many user records of the segment precede this entry, so a record's
sequence id is its segment's first sequence id + first position + its index among the entry's
user records (control and end-of-stream records take no position). Decoding checks every
length against the bytes present and the limits, so corrupt or foreign bytes give an
EntryFormatError, never a crash or an unbounded allocation.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import lz4.block
import zstandard

from core.dlsn import DLSN
from core.errors import EntryFormatError
from core.records import (
    ENTRY_RECORDS_BYTES_MAX,
    KNOWN_FLAGS,
    NO_POSITION,
    PRODUCER_PREFIX_BYTES,
    LogRecord,
    RecordFlag,
    StoredRecord,
    split_producer,
)

MAGIC = b"GL"
FORMAT_VERSION = 1
_HEADER = struct.Struct(">2sBBIQqIIB")
_RECORD = struct.Struct(">qHI")
_LENGTH = struct.Struct(">I")  # a record's payload length, the last field of its header
_LENGTH_AT = 10
HEADER_BYTES = _HEADER.size  # without the region name
RECORD_OVERHEAD_BYTES = _RECORD.size
REGION_BYTES_MAX = 255
# Records of one entry fit ENTRY_RECORDS_BYTES_MAX; with per-record overhead the raw body of an
# entry of tiny records is larger, so the decoder bounds it by this instead.
RAW_BODY_BYTES_MAX = 4 * ENTRY_RECORDS_BYTES_MAX
_KNOWN_FLAGS = int(KNOWN_FLAGS)
_NO_POSITION = int(NO_POSITION)
_PRODUCER = int(RecordFlag.PRODUCER)
_END_OF_STREAM = int(RecordFlag.END_OF_STREAM)
_PRODUCER_PREFIX = struct.Struct(">QQ")  # an idempotent write's producer id and seq
# Every valid flags value, made once: an enum constructor call per record decoded shows in
# profiles of the read path.
_FLAGS = {value: RecordFlag(value) for value in range(_KNOWN_FLAGS + 1)}
ZSTD_LEVEL = 3


class Codec(enum.IntEnum):
    NONE = 0
    LZ4 = 1
    ZSTD = 2

    @staticmethod
    def named(name: str) -> Codec:
        try:
            return Codec[name.upper()]
        except KeyError:
            names = ", ".join(c.name.lower() for c in Codec)
            raise EntryFormatError(
                f"compression {name!r} is unknown; expected one of {names}"
            ) from None


@dataclass(frozen=True, slots=True)
class DecodedEntry:
    first_position: int
    write_time_ms: int
    region: str
    records: tuple[StoredRecord, ...]
    codec: Codec


def encode_entry(
    records: Sequence[StoredRecord],
    *,
    first_position: int,
    write_time_ms: int,
    region: str,
    codec: Codec = Codec.NONE,
) -> bytes:
    """One entry's bytes. A codec that does not make the body smaller is not used."""
    assert records, "an entry carries at least one record"
    region_bytes = region.encode()
    assert len(region_bytes) <= REGION_BYTES_MAX, region
    parts: list[bytes] = []
    pack = _RECORD.pack
    for record in records:
        parts.append(pack(record.txid, int(record.flags), len(record.payload)))
        parts.append(record.payload)
    raw = b"".join(parts)
    assert len(raw) <= RAW_BODY_BYTES_MAX, len(raw)
    stored, used = _compress(raw, codec)
    header = _HEADER.pack(
        MAGIC,
        FORMAT_VERSION,
        used,
        len(records),
        first_position,
        write_time_ms,
        len(raw),
        len(stored),
        len(region_bytes),
    )
    return b"".join((header, region_bytes, stored))


def _compress(raw: bytes, codec: Codec) -> tuple[bytes, Codec]:
    if codec is Codec.LZ4:
        stored: bytes = lz4.block.compress(raw, store_size=False)
    elif codec is Codec.ZSTD:
        stored = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(raw)
    else:
        return raw, Codec.NONE
    return (stored, codec) if len(stored) < len(raw) else (raw, Codec.NONE)


def decode_entry(data: bytes, where: str = "entry") -> DecodedEntry:
    """The records of one entry; EntryFormatError (naming `where`) for anything malformed."""
    head, raw = _open_entry(data, where)
    records = _decode_records(raw, head.count, where)
    return DecodedEntry(head.first_position, head.write_time_ms, head.region, records, head.codec)


@dataclass(frozen=True, slots=True)
class EntryHead:
    first_position: int
    write_time_ms: int
    region: str
    count: int  # records, control records included
    codec: Codec


@dataclass(slots=True)
class EntryColumns:
    """An entry's user records as columns (decode_entry_columns): what a columnar reader
    (the Spark data source) needs without an object per record."""

    head: EntryHead
    slots: list[int]  # each user record's index among the entry's records
    txids: list[int]
    payloads: list[bytes]
    producers: list[tuple[int, int, int]]  # (index in these columns, producer id, seq)
    sealed: bool  # the entry holds an end-of-stream record


def decode_entry_columns(data: bytes, where: str = "entry") -> EntryColumns:
    """The user records of one entry as columns, checked as strictly as decode_entry."""
    head, raw = _open_entry(data, where)
    slots: list[int] = []
    txids: list[int] = []
    payloads: list[bytes] = []
    producers: list[tuple[int, int, int]] = []
    sealed = False
    offset = 0
    unpack = _RECORD.unpack_from
    size = _RECORD.size
    end = len(raw)
    for index in range(head.count):
        if offset + size > end:
            raise EntryFormatError(f"{where}: record {index} of {head.count} is cut short")
        txid, flags, length = unpack(raw, offset)
        offset += size
        if offset + length > end or txid < 0 or flags & ~_KNOWN_FLAGS:
            _refuse_record(where, index, txid, flags, length, end - offset)
        if flags:
            if flags & _PRODUCER and length < PRODUCER_PREFIX_BYTES:
                _refuse_record(where, index, txid, flags, length, end - offset)
            if flags & _NO_POSITION:
                sealed = sealed or bool(flags & _END_OF_STREAM)
                offset += length
                continue
            producer, producer_seq = _PRODUCER_PREFIX.unpack_from(raw, offset)
            producers.append((len(txids), producer, producer_seq))
            offset += PRODUCER_PREFIX_BYTES
            length -= PRODUCER_PREFIX_BYTES
        slots.append(index)
        txids.append(txid)
        payloads.append(bytes(raw[offset : offset + length]))
        offset += length
    if offset != end:
        raise EntryFormatError(f"{where}: {end - offset} bytes follow the last record")
    return EntryColumns(head, slots, txids, payloads, producers, sealed)


def open_entry(data: bytes, where: str = "entry") -> tuple[EntryHead, memoryview]:
    """An entry's header and its raw (decompressed) body, every length checked; the records
    themselves are not (decode_entry_columns checks them, or record_starts finds them)."""
    return _open_entry(data, where)


def record_starts(raw: memoryview, count: int) -> list[int] | None:
    """Where each of the `count` records of a raw body starts, by their length fields alone;
    None when those do not tile the body exactly (decode_entry_columns then says what is
    wrong). For columnar readers that check the rest of each record in bulk."""
    starts: list[int] = []
    append = starts.append
    unpack = _LENGTH.unpack_from
    offset = 0
    try:
        for _ in range(count):
            append(offset)
            offset += RECORD_OVERHEAD_BYTES + unpack(raw, offset + _LENGTH_AT)[0]
    except struct.error:
        return None
    return starts if offset == len(raw) else None


def _refuse_record(where: str, index: int, txid: int, flags: int, length: int, left: int) -> None:
    """Raises the error decode_entry gives for this record (the same checks, same order)."""
    if length > left:
        raise EntryFormatError(f"{where}: record {index} claims {length} bytes; {left} remain")
    if flags & ~_KNOWN_FLAGS or txid < 0:
        raise EntryFormatError(
            f"{where}: record {index} has flags {flags:#x} and txid {txid}; "
            f"expected flags within {_KNOWN_FLAGS:#x} and a txid >= 0"
        )
    raise EntryFormatError(
        f"{where}: record {index} is an idempotent write of {length} bytes; expected "
        f"at least {PRODUCER_PREFIX_BYTES} (producer id and seq)"
    )


def _open_entry(data: bytes, where: str) -> tuple[EntryHead, memoryview]:
    """The entry's header and its raw (decompressed) body, every length checked."""
    view = memoryview(data)
    if len(view) < HEADER_BYTES:
        raise EntryFormatError(
            f"{where}: {len(view)} bytes; a globelog entry has a {HEADER_BYTES}-byte header"
        )
    magic, version, codec_id, count, first_position, write_time_ms, raw_len, stored_len, rlen = (
        _HEADER.unpack_from(view, 0)
    )
    if magic != MAGIC:
        raise EntryFormatError(f"{where}: starts with {bytes(magic)!r}; expected {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise EntryFormatError(
            f"{where}: entry format version {version}; this globelog reads {FORMAT_VERSION}"
        )
    try:
        codec = Codec(codec_id)
    except ValueError:
        raise EntryFormatError(f"{where}: compression codec {codec_id} is unknown") from None
    body_at = HEADER_BYTES + rlen
    if len(view) != body_at + stored_len:
        raise EntryFormatError(
            f"{where}: {len(view)} bytes; the header describes {body_at + stored_len}"
        )
    if raw_len > RAW_BODY_BYTES_MAX or count > raw_len // RECORD_OVERHEAD_BYTES:
        raise EntryFormatError(
            f"{where}: {count} records in {raw_len} raw bytes; at most {RAW_BODY_BYTES_MAX} "
            f"bytes and {RECORD_OVERHEAD_BYTES} bytes per record"
        )
    try:
        region = bytes(view[HEADER_BYTES:body_at]).decode()
    except UnicodeDecodeError:
        raise EntryFormatError(f"{where}: the writer region is not UTF-8") from None
    raw = _decompress(view[body_at:], codec, raw_len, where)
    return EntryHead(first_position, write_time_ms, region, count, codec), raw


def _decompress(stored: memoryview, codec: Codec, raw_len: int, where: str) -> memoryview:
    if codec is Codec.NONE:
        if len(stored) != raw_len:
            raise EntryFormatError(f"{where}: body is {len(stored)} bytes; expected {raw_len}")
        return stored
    try:
        if codec is Codec.LZ4:
            raw: bytes = lz4.block.decompress(bytes(stored), uncompressed_size=raw_len)
        else:
            raw = zstandard.ZstdDecompressor().decompress(bytes(stored), max_output_size=raw_len)
    except (lz4.block.LZ4BlockError, zstandard.ZstdError) as err:
        raise EntryFormatError(f"{where}: {codec.name} body does not decompress: {err}") from err
    if len(raw) != raw_len:
        raise EntryFormatError(
            f"{where}: {codec.name} body decompressed to {len(raw)} bytes; expected {raw_len}"
        )
    return memoryview(raw)


def _decode_records(raw: memoryview, count: int, where: str) -> tuple[StoredRecord, ...]:
    records: list[StoredRecord] = []
    offset = 0
    unpack = _RECORD.unpack_from
    size = _RECORD.size
    end = len(raw)
    for index in range(count):
        if offset + size > end:
            raise EntryFormatError(f"{where}: record {index} of {count} is cut short")
        txid, flags, length = unpack(raw, offset)
        offset += size
        if offset + length > end:
            raise EntryFormatError(
                f"{where}: record {index} claims {length} bytes; {end - offset} remain"
            )
        if flags & ~_KNOWN_FLAGS or txid < 0:
            raise EntryFormatError(
                f"{where}: record {index} has flags {flags:#x} and txid {txid}; "
                f"expected flags within {_KNOWN_FLAGS:#x} and a txid >= 0"
            )
        if flags & _PRODUCER and length < PRODUCER_PREFIX_BYTES:
            raise EntryFormatError(
                f"{where}: record {index} is an idempotent write of {length} bytes; expected "
                f"at least {PRODUCER_PREFIX_BYTES} (producer id and seq)"
            )
        records.append(StoredRecord(txid, _FLAGS[flags], bytes(raw[offset : offset + length])))
        offset += length
    if offset != end:
        raise EntryFormatError(f"{where}: {end - offset} bytes follow the last record")
    return tuple(records)


def user_record_count(records: Sequence[StoredRecord]) -> int:
    """How many of `records` take a position (everything but control and end-of-stream)."""
    return sum(1 for r in records if not (r.flags and r.flags & _NO_POSITION))


def log_records(
    entry: DecodedEntry, sequence: int, entry_id: int, first_seq: int
) -> list[tuple[DLSN, StoredRecord, int]]:
    """Every record of `entry` (entry `entry_id` of segment `sequence`) with its DLSN and
    sequence id (-1 for control and end-of-stream records, which take no position)."""
    found = []
    position = first_seq + entry.first_position
    for slot, record in enumerate(entry.records):
        if record.flags and record.flags & _NO_POSITION:
            found.append((DLSN(sequence, entry_id, slot), record, -1))
        else:
            found.append((DLSN(sequence, entry_id, slot), record, position))
            position += 1
    return found


def as_log_record(record: StoredRecord, dlsn: DLSN, seq: int, entry: DecodedEntry) -> LogRecord:
    """A user record of `entry` as readers receive it (an idempotent write's producer prefix
    moved out of its payload)."""
    if record.flags and record.flags & _PRODUCER:
        producer, producer_seq, payload = split_producer(record.payload)
        return LogRecord(
            dlsn,
            record.txid,
            seq,
            payload,
            entry.write_time_ms,
            entry.region,
            producer,
            producer_seq,
        )
    return LogRecord(dlsn, record.txid, seq, record.payload, entry.write_time_ms, entry.region)
