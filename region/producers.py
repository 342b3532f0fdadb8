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

from collections import OrderedDict
from dataclasses import dataclass, field

from core.errors import ProducerSeqStaleError
from writer.events import Written

WINDOW = 256  # writes per producer answered from memory when retried
PRODUCERS_MAX = 10_000  # producers remembered per stream (the least recently seen go first)
SCAN_RECORDS = 100_000  # how far back a new owner reads to rebuild the table
PRODUCER_ID_MAX = (1 << 64) - 1
PRODUCER_SEQ_MAX = (1 << 63) - 1


@dataclass(slots=True)
class _Producer:
    last_seq: int
    acks: OrderedDict[int, Written] = field(default_factory=OrderedDict)


class ProducerTable:
    def __init__(self, window: int = WINDOW, producers_max: int = PRODUCERS_MAX) -> None:
        self.window = window
        self.producers_max = producers_max
        self._producers: OrderedDict[int, _Producer] = OrderedDict()

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
                self._producers.popitem(last=False)
        else:
            self._producers.move_to_end(producer)
            known.last_seq = max(known.last_seq, seq)
        known.acks[seq] = written
        known.acks.move_to_end(seq)
        floor = known.last_seq - self.window
        while known.acks and (len(known.acks) > self.window or next(iter(known.acks)) <= floor):
            known.acks.popitem(last=False)


def check_producer(producer: int, seq: int) -> None:
    """Raises ValueError naming the field when the numbers are out of range."""
    if not 0 <= producer <= PRODUCER_ID_MAX:
        raise ValueError(f"producer id {producer} is outside 0..{PRODUCER_ID_MAX}")
    if not 0 <= seq <= PRODUCER_SEQ_MAX:
        raise ValueError(f"producer seq {seq} is outside 0..{PRODUCER_SEQ_MAX}")
