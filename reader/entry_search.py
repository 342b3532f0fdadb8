"""Finding a position inside one segment: a binary search over its entries.

Txids, sequence ids and write times never decrease along a segment, so "the first entry
whose records reach the target" splits the entries in two; each probe reads one entry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from core.dlsn import DLSN
from core.entry_format import DecodedEntry, decode_entry
from core.records import NO_POSITION
from core.segments import SegmentMetadata
from ledger import LedgerReader
from reader.positions import By, Position


async def first_entry(last_entry: int, satisfies: Callable[[int], Awaitable[bool]]) -> int:
    """The first entry id in 0..last_entry for which `satisfies` holds (monotone), or
    last_entry + 1 when none does."""
    low, high = 0, last_entry + 1
    while low < high:
        middle = (low + high) // 2
        if await satisfies(middle):
            high = middle
        else:
            low = middle + 1
    return low


async def search_segment(
    reader: LedgerReader, segment: SegmentMetadata, position: Position, last_entry: int
) -> DLSN:
    """The DLSN of the first record at or after `position` in entries 0..last_entry, or the
    position after them when none qualifies."""
    assert position.by is not By.DLSN, position
    target = position.value
    assert isinstance(target, int)
    cache: dict[int, DecodedEntry] = {}

    async def entry(entry_id: int) -> DecodedEntry:
        if entry_id not in cache:
            where = f"segment {segment.sequence} entry {entry_id}"
            cache[entry_id] = decode_entry(await reader.read_entry(entry_id), where)
        return cache[entry_id]

    def reaches(decoded: DecodedEntry) -> bool:
        if position.by is By.TIME:
            return decoded.write_time_ms >= target
        if position.by is By.SEQ:
            users = sum(1 for r in decoded.records if not (r.flags and r.flags & NO_POSITION))
            return segment.first_seq + decoded.first_position + users > target
        # Control records count too: theirs is the writer's last txid when sent, so a
        # control entry reaches the target exactly when every later entry does (monotone).
        return any(r.txid >= target for r in decoded.records)

    async def satisfies(entry_id: int) -> bool:
        return reaches(await entry(entry_id))

    found = await first_entry(last_entry, satisfies)
    if found > last_entry:
        return DLSN(segment.sequence, last_entry + 1, 0)
    decoded = await entry(found)
    seq = segment.first_seq + decoded.first_position
    for slot, record in enumerate(decoded.records):
        if record.flags and record.flags & NO_POSITION:
            continue
        if position.by is By.SEQ and seq >= target:
            return DLSN(segment.sequence, found, slot)
        if position.by is By.TXID and record.txid >= target:
            return DLSN(segment.sequence, found, slot)
        if position.by is By.TIME:
            return DLSN(segment.sequence, found, slot)
        seq += 1
    return DLSN(segment.sequence, found, 0)
