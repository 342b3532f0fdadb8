"""Many entries' user records as numpy and Arrow columns at once, for the data source's
workers (pipeline/batch.py): the entries' raw bodies are joined, every record header is read
with one gather, and the payloads come out as one Arrow binary column, with no Python step
per record when the records of an entry are all of one length, and one (the search for where
each record starts) when they are not.

Checked as strictly as core.entry_format.decode_entry_columns: what the bulk checks refuse is
handed to it, and it raises the EntryFormatError naming the fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.lib.stride_tricks import sliding_window_view

from core.entry_format import (
    RAW_BODY_BYTES_MAX,
    RECORD_OVERHEAD_BYTES,
    EntryColumns,
    EntryHead,
    decode_entry_columns,
    open_entry,
    record_starts,
)
from core.errors import EntryFormatError
from core.records import KNOWN_FLAGS, NO_POSITION, PRODUCER_PREFIX_BYTES, RecordFlag

# A record's header in a raw body (core/entry_format.py), as numpy reads it.
_RECORD_DTYPE = np.dtype([("txid", ">i8"), ("flags", ">u2"), ("length", ">u4")])
_LENGTH_AT = 10  # the header's payload length field
_TO_END = (1 << 31) - 1  # binary_slice's stop for "to the end of each value"
# Entries decoded at once, at most: their raw bodies must fit an Arrow binary column's int32
# offsets.
MAX_ENTRIES = ((1 << 31) - 1) // RAW_BODY_BYTES_MAX


@dataclass(frozen=True, slots=True)
class RunColumns:
    """The user records of a run of entries, in order. Row i belongs to entry entry_index[i]
    (an index into the run); its slot is its index among that entry's records, control records
    included, and its rank its index among the entry's user records (what sequence ids count).
    A record without a producer has producer_set False (its id and seq are 0)."""

    heads: list[EntryHead]
    entry_index: Any  # int64
    slots: Any  # int64
    ranks: Any  # int64
    txids: Any  # int64
    payloads: Any  # pa.BinaryArray
    producer_ids: Any  # int64 (u64 on the wire, as two's complement)
    producer_seqs: Any  # int64
    producer_set: Any  # bool

    def __len__(self) -> int:
        return len(self.slots)

    def take(self, rows: Any) -> RunColumns:
        """These columns' rows where the boolean mask `rows` is set."""
        return RunColumns(
            self.heads,
            self.entry_index[rows],
            self.slots[rows],
            self.ranks[rows],
            self.txids[rows],
            self.payloads.filter(pa.array(rows)),
            self.producer_ids[rows],
            self.producer_seqs[rows],
            self.producer_set[rows],
        )


def decode_run(bodies: Sequence[bytes], wheres: Sequence[str]) -> RunColumns:
    """The user records of these entries (`wheres` names each in errors); EntryFormatError
    naming the first malformed one."""
    if len(bodies) > MAX_ENTRIES:
        raise ValueError(f"{len(bodies)} entries decoded at once; at most {MAX_ENTRIES}")
    heads: list[EntryHead] = []
    raws: list[memoryview] = []
    starts: list[Any] = []
    base = 0
    for body, where in zip(bodies, wheres, strict=True):
        try:
            head, raw = open_entry(body, where)
        except EntryFormatError:
            return _strict_run(bodies, wheres)  # names the first fault, maybe an earlier entry's
        at = _starts(raw, head.count)
        if at is None:
            return _strict_run(bodies, wheres)  # raises, naming the fault
        heads.append(head)
        raws.append(raw)
        starts.append(at + base)
        base += len(raw)
    columns = _bulk_run(heads, b"".join(raws), starts)
    return _strict_run(bodies, wheres) if columns is None else columns


def _starts(raw: memoryview, count: int) -> Any:
    """Where each record of a raw body starts (int64), or None if the record lengths do not
    tile it. Records of one length are checked in bulk; others are walked one by one."""
    stride = len(raw) // count if count else 0
    if stride >= RECORD_OVERHEAD_BYTES and stride * count == len(raw):
        grid = np.frombuffer(raw, np.uint8).reshape(count, stride)
        lengths = grid[:, _LENGTH_AT:RECORD_OVERHEAD_BYTES]
        if stride == RECORD_OVERHEAD_BYTES + int.from_bytes(lengths[0], "big") and bool(
            (lengths == lengths[0]).all()
        ):
            return np.arange(0, len(raw), stride, dtype=np.int64)
    found = record_starts(raw, count)
    return None if found is None else np.asarray(found, np.int64)


def _bulk_run(heads: list[EntryHead], joined: bytes, starts: list[Any]) -> RunColumns | None:
    """The user records of the joined raw bodies, whose records start at `starts` (one array
    per entry); None if a record's txid, flags or producer prefix is invalid."""
    data = np.frombuffer(joined, np.uint8)
    at = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    count = len(at)
    if count == 0:
        return _empty(heads)
    headers = sliding_window_view(data, RECORD_OVERHEAD_BYTES)[at].view(_RECORD_DTYPE)[:, 0]
    txid = headers["txid"].astype(np.int64)
    flags = headers["flags"].astype(np.int64)
    length = headers["length"].astype(np.int64)
    producer = (flags & int(RecordFlag.PRODUCER)) != 0
    if (txid < 0).any() or (flags & ~int(KNOWN_FLAGS)).any():
        return None
    if (producer & (length < PRODUCER_PREFIX_BYTES)).any():
        return None
    counts = np.fromiter((len(s) for s in starts), np.int64, len(starts))
    first_row = np.concatenate(([0], np.cumsum(counts)[:-1]))
    entry_index = np.repeat(np.arange(len(starts), dtype=np.int64), counts)
    slots = np.arange(count, dtype=np.int64) - first_row[entry_index]
    user = (flags & int(NO_POSITION)) == 0
    users_before = np.cumsum(user) - user
    # (an entry of no records, which may come last, starts at `count`: one past the rows)
    ranks = users_before - np.append(users_before, 0)[first_row][entry_index]
    ids = np.zeros(count, np.int64)
    seqs = np.zeros(count, np.int64)
    records = pa.Array.from_buffers(
        pa.binary(),
        count,
        [None, pa.py_buffer(np.append(at, len(data)).astype(np.int32)), pa.py_buffer(joined)],
    )
    payloads = pc.binary_slice(records, RECORD_OVERHEAD_BYTES, _TO_END)
    if producer.any():
        prefix_at = at[producer] + RECORD_OVERHEAD_BYTES
        prefix = sliding_window_view(data, PRODUCER_PREFIX_BYTES)[prefix_at]
        pairs = prefix.view(">u8").astype(np.uint64).view(np.int64)
        ids[producer], seqs[producer] = pairs[:, 0], pairs[:, 1]
        after_prefix = pc.binary_slice(
            records, RECORD_OVERHEAD_BYTES + PRODUCER_PREFIX_BYTES, _TO_END
        )
        payloads = pc.if_else(pa.array(producer), after_prefix, payloads)
    columns = RunColumns(
        heads, entry_index, slots, ranks, txid, payloads, ids, seqs, producer & user
    )
    return columns if user.all() else columns.take(user)


def _empty(heads: list[EntryHead]) -> RunColumns:
    none = np.zeros(0, np.int64)
    return RunColumns(
        heads, none, none, none, none, pa.array([], pa.binary()), none, none, none.astype(bool)
    )


def _strict_run(bodies: Sequence[bytes], wheres: Sequence[str]) -> RunColumns:
    """decode_entry_columns of each entry (it raises for a malformed one) as RunColumns."""
    decoded = [
        decode_entry_columns(body, where) for body, where in zip(bodies, wheres, strict=True)
    ]
    return _from_columns(decoded)


def _from_columns(decoded: list[EntryColumns]) -> RunColumns:
    entry_index: list[int] = []
    slots: list[int] = []
    ranks: list[int] = []
    txids: list[int] = []
    payloads: list[bytes] = []
    ids: list[int] = []
    seqs: list[int] = []
    set_: list[bool] = []
    for index, columns in enumerate(decoded):
        producers = {at: (producer, seq) for at, producer, seq in columns.producers}
        for rank, (slot, txid, payload) in enumerate(
            zip(columns.slots, columns.txids, columns.payloads, strict=True)
        ):
            producer, seq = producers.get(rank, (0, 0))
            entry_index.append(index)
            slots.append(slot)
            ranks.append(rank)
            txids.append(txid)
            payloads.append(payload)
            ids.append(_signed(producer))
            seqs.append(_signed(seq))
            set_.append(rank in producers)
    return RunColumns(
        [columns.head for columns in decoded],
        np.array(entry_index, np.int64),
        np.array(slots, np.int64),
        np.array(ranks, np.int64),
        np.array(txids, np.int64),
        pa.array(payloads, pa.binary()),
        np.array(ids, np.int64),
        np.array(seqs, np.int64),
        np.array(set_, bool),
    )


def _signed(u64: int) -> int:
    """A u64 from the wire as the int64 with the same bits (what the bulk path's view gives)."""
    return u64 - (1 << 64) if u64 >= 1 << 63 else u64
