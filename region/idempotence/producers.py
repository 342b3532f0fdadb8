"""Idempotent writes: each producer's recent sequence numbers and where those writes landed.

A producer (an application instance, a Spark task) names itself with a 64-bit producer id and
numbers its writes 0, 1, 2, ... Every record it writes carries both numbers in the stream
(core.records.RecordFlag.PRODUCER), so the table below is state the stream itself holds: an
owner that takes a stream over rebuilds it by reading the stream's last `scan_records`
records. A write whose (producer, seq) the table knows is answered with where it landed the
first time, not written again; a seq older than the producer's last `window` writes is
refused (`producer_seq_stale`), since nothing can tell any more whether it landed.

Pure bookkeeping: no IO, no clock. The write proxy does the reading and the waiting.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

from core.errors import ProducerSeqStaleError
from writer.events import Written

WINDOW = 256  # writes per producer answered from memory when retried
PRODUCERS_MAX = 10_000  # producers remembered per stream (the least recently seen go first)
SCAN_RECORDS = 100_000  # how far back a new owner reads to rebuild the table
PRODUCER_ID_MAX = (1 << 64) - 1
PRODUCER_SEQ_MAX = (1 << 63) - 1


class ProducerBudget:
    """The acks every producer table of a proxy remembers together, at most `most` (each
    costs about 300 bytes). Past it, the table holding the most gives up its least recently
    seen producers, an eighth of its acks at a time: a client that names producers without
    end in one stream costs that stream's producers their memory, not every stream's."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.used = 0
        self._tables: weakref.WeakSet[ProducerTable] = weakref.WeakSet()

    def join(self, table: ProducerTable) -> None:
        self._tables.add(table)

    def leave(self, table: ProducerTable) -> None:
        self._tables.discard(table)
        self.used -= table.acks

    def grew(self) -> None:
        while self.used > self.most:
            largest = max(self._tables, key=lambda t: t.acks, default=None)
            if largest is None or largest.acks == 0:
                return
            largest.forget_acks(max(1, largest.acks // 8))


@dataclass(slots=True)
class _Producer:
    last_seq: int
    acks: OrderedDict[int, Written] = field(default_factory=OrderedDict)


class ProducerTable:
    def __init__(
        self,
        window: int = WINDOW,
        producers_max: int = PRODUCERS_MAX,
        budget: ProducerBudget | None = None,
    ) -> None:
        self.window = window
        self.producers_max = producers_max
        self.acks = 0  # remembered over every producer
        self._producers: OrderedDict[int, _Producer] = OrderedDict()
        self._budget = budget
        if budget is not None:
            budget.join(self)

    def __len__(self) -> int:
        return len(self._producers)

    def lookup(self, producer: int, seq: int) -> Written | None:
        """Where (producer, seq) landed, or None when it has not been written.

        Raises ProducerSeqStaleError for a seq below the producer's window: it may or may
        not have landed, and writing it again could duplicate it.
        """
        known = self._producers.get(producer)
        if known is None:
            return None
        landed = known.acks.get(seq)
        if landed is not None:
            return landed
        if seq <= known.last_seq - self.window:
            raise ProducerSeqStaleError(
                f"producer {producer:#x}: seq {seq} is older than its last {self.window} writes "
                f"(the last is {known.last_seq}); whether it landed is no longer known"
            )
        return None

    def last_seq(self, producer: int) -> int | None:
        """The highest seq of the producer that landed, or None for a producer not known."""
        known = self._producers.get(producer)
        return None if known is None else known.last_seq

    def record(self, producer: int, seq: int, written: Written) -> None:
        """Remembers that (producer, seq) landed at `written`."""
        known = self._producers.get(producer)
        if known is None:
            known = self._producers[producer] = _Producer(seq)
            if len(self._producers) > self.producers_max:
                self._forget_oldest()
        else:
            self._producers.move_to_end(producer)
            known.last_seq = max(known.last_seq, seq)
        before = len(known.acks)
        known.acks[seq] = written
        known.acks.move_to_end(seq)
        floor = known.last_seq - self.window
        while known.acks and (len(known.acks) > self.window or next(iter(known.acks)) <= floor):
            known.acks.popitem(last=False)
        self._counted(len(known.acks) - before)
        if self._budget is not None:
            self._budget.grew()

    def forget_acks(self, count: int) -> None:
        """Forgets the least recently seen producers until `count` acks are gone (for the
        proxy's budget; such a producer's retry of an old write is no longer recognised)."""
        forgotten = 0
        while forgotten < count and self._producers:
            forgotten += self._forget_oldest()

    def _forget_oldest(self) -> int:
        _, gone = self._producers.popitem(last=False)
        self._counted(-len(gone.acks))
        return len(gone.acks)

    def _counted(self, change: int) -> None:
        self.acks += change
        if self._budget is not None:
            self._budget.used += change

    def close(self) -> None:
        """Gives the table's acks back to the budget (its stream was let go)."""
        if self._budget is not None:
            self._budget.leave(self)
            self._budget = None


def check_producer(producer: int, seq: int) -> None:
    """Raises ValueError naming the field when the numbers are out of range."""
    if not 0 <= producer <= PRODUCER_ID_MAX:
        raise ValueError(f"producer id {producer} is outside 0..{PRODUCER_ID_MAX}")
    if not 0 <= seq <= PRODUCER_SEQ_MAX:
        raise ValueError(f"producer seq {seq} is outside 0..{PRODUCER_SEQ_MAX}")
