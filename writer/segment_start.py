"""Starting a segment: the owner's new epoch (a ledger, then its metadata in one multi-op).

The next segment's ledger depends on nothing the end of the current segment finds, so it is
made while that end happens (a new owner's recovery of the last segment, or a roll's close),
and the completion of the one and the start of the other are one ZooKeeper multi-op. On a WAN
where every ZooKeeper write crosses regions, that takes two or three writes off an owner
failover and off every roll. A new owner makes it sooner still, while it queues for the
stream's lock (`LedgerInAdvance`): making a ledger is two writes (its id, its metadata), which
then no longer stand between the recovery and the multi-op.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from core import runtime
from core.errors import BadVersionError, GlobelogError
from core.segments import SegmentMetadata, SegmentState
from core.streams import LEDGER_NAMESPACE_KEY, LEDGER_SEGMENT_KEY, LEDGER_STREAM_KEY
from core.topology import Replication
from global_meta.store import Op
from global_meta.streams import OwnerLock, StreamCounters, StreamMetaStore, VersionedSegment
from ledger import LedgerClient, LedgerWriter

log = logging.getLogger(__name__)

# The last segment, its completed metadata and more ops to commit with them (the close of its
# recovered ledger), to complete with the next one's start; None when there is nothing to
# complete.
Completing = tuple[VersionedSegment, SegmentMetadata, tuple[Op, ...]] | None


def now_ms() -> int:
    return runtime.wall_ms()


async def start_segment(
    streams: StreamMetaStore,
    ledgers: LedgerClient,
    stream: str,
    replication: Replication,
    region: str,
    lock: OwnerLock,
    end_last: Callable[[], Awaitable[Completing]] | None = None,
    counters: StreamCounters | None = None,
    advance: LedgerInAdvance | None = None,
) -> tuple[VersionedSegment, LedgerWriter, int]:
    """Creates the next segment's ledger and metadata: the owner's new epoch. `end_last`
    ends the current segment meanwhile (its ledger recovered or closed) and says what to
    complete in the same multi-op.

    Its first sequence id and txid floor come from the stream's counters, which every
    completion moves past the previous segment (and which outlive segments deleted by
    retention; `counters`: as the caller just read them). Returns the segment, its ledger and
    the txid floor. `advance`: a ledger made earlier, used when it was made for this
    sequence."""
    if counters is None:
        counters = await streams.counters(stream)
    sequence = counters.max_sequence + 1
    making = None if advance is None else advance.take(sequence)
    if making is None:
        making = asyncio.ensure_future(
            _new_ledger(ledgers, streams.namespace, stream, sequence, replication)
        )
    try:
        completing = None if end_last is None else await end_last()
        ledger = await asyncio.shield(making)  # a cancelled start still discards it whole
        after = counters if completing is None else counters.after(completing[1])
        segment = SegmentMetadata(
            sequence=sequence,
            ledger_id=ledger.ledger_id,
            state=SegmentState.IN_PROGRESS,
            first_txid=max(after.max_txid, 0),
            first_seq=after.next_seq,
            created_ms=now_ms(),
            writer_region=region,
        )
        ending, also = (None, ()) if completing is None else (completing[:2], completing[2])
        versioned = await streams.start_segment(stream, segment, counters, lock, ending, also)
    except BadVersionError:
        # a definite no (the metadata moved): nothing names the ledger, and a ledger made in
        # advance goes back to be taken again by the next try if its sequence still fits
        if advance is None or not advance.give_back(making):
            await asyncio.shield(_discard(streams, ledgers, stream, making))
        raise
    except BaseException:
        await asyncio.shield(_discard(streams, ledgers, stream, making))
        raise
    return versioned, ledger, after.max_txid


class LedgerInAdvance:
    """The next segment's ledger, made by a new owner before it holds the stream's lock: for
    the sequence the stream's counters give (`read`: the segments and counters read beside
    the queueing), while the lock is queued for and the last owner's segment recovered. The
    start uses it when its sequence is still the next one (`take`; a start that fails on a
    metadata version gives it back for the next try); otherwise, or if making it failed, the
    start makes its own and `discard` deletes this one. A take that loses the lock
    discards it too: a ledger for nothing, in a race that is rare (a proxy looks for a live
    owner before it queues)."""

    def __init__(
        self,
        streams: StreamMetaStore,
        ledgers: LedgerClient,
        stream: str,
        replication: Replication,
        read: asyncio.Future[tuple[list[VersionedSegment], StreamCounters]],
    ) -> None:
        self._streams = streams
        self.stream = stream
        self._ledgers = ledgers
        self._read = read
        self._taken = False
        self._making = asyncio.ensure_future(self._make(replication))

    @property
    def taken(self) -> bool:
        return self._taken

    @property
    def sequence(self) -> int | None:
        """The sequence it is made for; None until the counters are read (or if that failed)."""
        read = self._read
        if not read.done() or read.cancelled() or read.exception() is not None:
            return None
        return read.result()[1].max_sequence + 1

    async def _make(self, replication: Replication) -> LedgerWriter:
        await asyncio.shield(self._read)  # cancelling this leaves the read to its owner
        sequence = self.sequence
        assert sequence is not None
        return await _new_ledger(
            self._ledgers, self._streams.namespace, self.stream, sequence, replication
        )

    def take(self, sequence: int) -> asyncio.Future[LedgerWriter] | None:
        """The ledger being made (or made) for `sequence`, handed over once: its discard is
        then the taker's. None when it is for another sequence, its making failed, or it was
        taken already."""
        making = self._making
        if self._taken or self.sequence != sequence:
            return None
        if making.done() and (making.cancelled() or making.exception() is not None):
            return None
        self._taken = True
        return making

    def give_back(self, making: asyncio.Future[LedgerWriter]) -> bool:
        """Takes back what `take` handed over (a start that failed on a metadata version,
        which named it nowhere); False if `making` is not this one's."""
        if making is not self._making:
            return False
        self._taken = False
        return True

    async def discard(self) -> None:
        """Deletes the ledger unless it was taken (see `_discard`), once made."""
        if self._taken:
            return
        self._taken = True
        # (shielded: a discard cut short must not cancel the making, whose ledger it leaves)
        await _discard(self._streams, self._ledgers, self.stream, asyncio.shield(self._making))


async def _new_ledger(
    ledgers: LedgerClient, namespace: str, stream: str, sequence: int, replication: Replication
) -> LedgerWriter:
    custom = (
        (LEDGER_NAMESPACE_KEY, namespace.encode()),
        (LEDGER_STREAM_KEY, stream.encode()),
        (LEDGER_SEGMENT_KEY, str(sequence).encode()),
    )
    # a replication republished with the regions (membership/) wins over the writer's own
    return await ledgers.create(ledgers.replication_for_new(replication), custom_metadata=custom)


async def _discard(
    streams: StreamMetaStore,
    ledgers: LedgerClient,
    stream: str,
    making: asyncio.Future[LedgerWriter],
) -> None:
    """A ledger made for a segment that did not start: abandoned and deleted (once made, if
    it is still being made; nothing, if making it failed). Unless a segment names it after
    all: a multi-op whose answer was lost may have landed, and a started segment's ledger must
    stay. When that cannot be told (ZooKeeper away), it stays too: a ledger no segment names
    is only space, a segment whose ledger is gone is lost records."""
    try:
        ledger = await making
    except (GlobelogError, asyncio.CancelledError, TimeoutError):
        return
    try:
        await ledger.abandon()
        named = {s.segment.ledger_id for s in await streams.segments(stream)}
    except GlobelogError as err:
        log.warning("ledger %d of %s left in place: %s", ledger.ledger_id, stream, err)
        return
    if ledger.ledger_id in named:
        return
    try:
        await ledgers.delete(ledger.ledger_id)
    except GlobelogError as err:
        log.warning("ledger %d of %s not deleted: %s", ledger.ledger_id, stream, err)
