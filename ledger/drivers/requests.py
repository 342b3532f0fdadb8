"""The bookie requests the ledger machines ask for, carried out one way for every driver.

A machine (AddState, RecoveryState, EntryReadState, ReadLacState) says what to send: `SendAdd`,
`SendRead`, `SendReadLac`. Whichever driver runs it (the write handle, the read handle,
recovery), the request goes out the same way and its answer comes back as the event the
machine expects: the entry decoded and its digest checked, and an error a bookie answered
turned into the failure kind the machine knows (`failure_kind`). The drivers differ only in
what they keep of an answer (a read body, the highest LAC seen) and in when they ask; the write
handle's fast path (an add written on an open connection without a task, `_send_now`) frames
the same request itself and falls back to `LedgerRequests.add`.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import GlobelogError
from ledger.codecs.entry import EntryCodec
from ledger.connections.bookie_client import BookieClient
from ledger.machines.add_events import AddAcked, AddFailed, SendAdd
from ledger.machines.read_lac_state import LacReadFailed, LacReplied
from ledger.machines.read_state import EntryRead, EntryReadFailed, SendRead
from ledger.machines.signals import failure_kind


@dataclass(frozen=True, slots=True)
class ReadOutcome:
    event: EntryRead | EntryReadFailed
    payload: bytes | None = None  # the entry's payload, when it was read
    max_lac: int | None = None  # the highest LAC the bookie knew, when it said


@dataclass(frozen=True, slots=True)
class LedgerRequests:
    """One ledger's requests to its bookies. `key`: the ledger's master key, which adds,
    fencing reads and recovery need (None: reads that need none)."""

    bookies: BookieClient
    ledger_id: int
    codec: EntryCodec
    key: bytes | None = None

    async def add(self, action: SendAdd, payload: bytes) -> AddAcked | AddFailed:
        assert self.key is not None, "an add needs the ledger's master key"
        body = self.codec.encode_entry(action.entry_id, action.lac, action.length, payload)
        try:
            await self.bookies.add_entry(
                action.bookie, self.ledger_id, action.entry_id, self.key, body, action.recovery
            )
        except GlobelogError as err:
            return AddFailed(action.entry_id, action.bookie, failure_kind(err))
        return AddAcked(action.entry_id, action.bookie)

    async def read(self, action: SendRead, *, fence: bool = False) -> ReadOutcome:
        try:
            response = await self.bookies.read_entry(
                action.bookie, self.ledger_id, action.entry_id, fence, self.key if fence else None
            )
            entry = self.codec.decode_entry(response.body or b"", action.entry_id)
        except GlobelogError as err:
            return ReadOutcome(EntryReadFailed(action.entry_id, action.bookie, failure_kind(err)))
        read = EntryRead(action.entry_id, action.bookie, len(entry.payload), entry.length)
        return ReadOutcome(read, entry.payload, response.max_lac)

    async def last(self, bookie: str, *, fence: bool = False) -> LacReplied | LacReadFailed:
        """The bookie's last entry's LAC and length (a `SendReadLac`); fencing when asked."""
        try:
            response = await self.bookies.read_last_entry(
                bookie, self.ledger_id, fence, self.key if fence else None
            )
            entry = self.codec.decode_last_entry(response.body or b"")
        except GlobelogError as err:
            return LacReadFailed(bookie, failure_kind(err))
        return LacReplied(bookie, entry.lac, entry.length)
