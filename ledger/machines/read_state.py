"""Reading one entry from its replicas, with speculative retries: a pure state machine.

BookKeeper's PendingReadOp (SequenceReadRequest / ParallelReadRequest), sans-IO. The driver
gives the read order and the speculative delays (both from placement); the machine decides
whom to ask and when:

- sequential (default): ask order[0]; when a tick finds `delays_s[k]` passed since order[k]
  was asked and no answer completed the read, also ask order[k+1] (a speculative read).
  On an error, ask the next replica at once if no other request is outstanding (BookKeeper
  waits for outstanding ones rather than add load).
- parallel: ask every replica at once (used by recovery, where the first good copy or
  enough denials should come as soon as possible).

The first valid body completes the read (`CompleteRead` names the bookie whose body to
use). `missing_quorum` denials (NoSuchEntry/NoSuchLedger) conclude the entry is not stored
(`FailRead(MISSING)`): recovery passes W - A + 1, since then at most A - 1 bookies can hold
it and it cannot have been acknowledged; ordinary reads need every replica to deny it.
When every replica failed otherwise, `FailRead(UNAVAILABLE)` lists each bookie's answer.
Replicas asked before the one that answered and still silent are reported slow;
replicas that answered with an error or timed out are reported failed (`RecordHealth`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from ledger.machines.signals import (
    READ_TIMEOUT_S,
    BookieFailure,
    Health,
    Outbox,
    RecordHealth,
    Ticked,
    bookie_list,
)

# ---------------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class EntryRead:
    """`bookie` returned entry `entry_id` and its digest verified.

    payload_len: the payload's size; length: the ledger length through the entry (header).
    """

    entry_id: int
    bookie: str
    payload_len: int
    length: int


@dataclass(frozen=True, slots=True)
class EntryReadFailed:
    """The read failed; a body that failed its digest is DIGEST_MISMATCH (a corrupt replica)."""

    entry_id: int
    bookie: str
    kind: BookieFailure


ReadEvent = EntryRead | EntryReadFailed | Ticked

# --------------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class SendRead:
    """READ entry `entry_id` from `bookie`; with FENCE_LEDGER when `fence` (recovery)."""

    entry_id: int
    bookie: str
    fence: bool


@dataclass(frozen=True, slots=True)
class CompleteRead:
    """The read is done: the body `bookie` returned for `entry_id` is the answer."""

    entry_id: int
    bookie: str


class ReadFailure(enum.Enum):
    MISSING = "missing"  # enough replicas say they hold no copy
    UNAVAILABLE = "unavailable"  # every replica failed, and not enough of them denied it


@dataclass(frozen=True, slots=True)
class FailRead:
    entry_id: int
    reason: ReadFailure
    message: str


ReadAction = SendRead | CompleteRead | FailRead | RecordHealth

_OK = "ok"  # an answer that completed the read


class EntryReadState:
    """One read of one entry. Feed `handle`; drain `take_actions()` after each call."""

    def __init__(
        self,
        entry_id: int,
        order: Sequence[str],
        *,
        now_s: float = 0.0,
        delays_s: Sequence[float] = (),
        timeout_s: float = READ_TIMEOUT_S,
        fence: bool = False,
        parallel: bool = False,
        missing_quorum: int | None = None,
    ) -> None:
        assert entry_id >= 0, entry_id
        assert order and len(set(order)) == len(order), f"read order {order}"
        assert all(delay > 0 for delay in delays_s), delays_s
        assert timeout_s > 0, timeout_s
        self.entry_id = entry_id
        self._order = tuple(order)
        self._delays_s = tuple(delays_s)
        self._timeout_s = timeout_s
        self._fence = fence
        self._parallel = parallel
        self._missing_quorum = len(self._order) if missing_quorum is None else missing_quorum
        assert 1 <= self._missing_quorum <= len(self._order), missing_quorum
        # NoSuchEntry is news only where every replica should hold the entry.
        self._deny_is_failure = missing_quorum is None
        self._now_s = now_s
        self._next = 0  # position in `order` of the next replica to ask
        self._last_sent_s = now_s
        self._sent_s: dict[str, float] = {}  # every replica asked, and when
        self._answers: dict[str, BookieFailure | str] = {}
        self._done = False
        self._outbox: Outbox[ReadAction] = Outbox()
        for _ in range(len(self._order) if parallel else 1):
            self._send_next()

    @property
    def done(self) -> bool:
        return self._done

    def next_wakeup_s(self) -> float | None:
        """When a request times out or the next speculative read is due; None when done."""
        if self._done:
            return None
        deadlines = [self._sent_s[b] + self._timeout_s for b in self._outstanding()]
        speculation = self._speculation_due_s()
        if speculation is not None:
            deadlines.append(speculation)
        return min(deadlines, default=None)

    def take_actions(self) -> list[ReadAction]:
        return self._outbox.take()

    def handle(self, event: ReadEvent) -> None:
        if isinstance(event, Ticked):
            assert event.now_s >= self._now_s, (event.now_s, self._now_s)
            self._now_s = event.now_s
        if self._done:
            return  # a late answer to a finished read
        match event:
            case EntryRead():
                assert event.entry_id == self.entry_id, (event, self.entry_id)
                if self._is_outstanding(event.bookie):
                    self._on_read(event.bookie)
            case EntryReadFailed():
                assert event.entry_id == self.entry_id, (event, self.entry_id)
                if self._is_outstanding(event.bookie):
                    self._on_failed(event.bookie, event.kind)
                    self._after_failures()
            case Ticked():
                self._on_tick()

    def _on_read(self, bookie: str) -> None:
        self._answers[bookie] = _OK
        if not self._parallel:
            for earlier in self._order[: self._order.index(bookie)]:
                if earlier in self._sent_s and earlier not in self._answers:
                    self._emit(RecordHealth(earlier, Health.SLOW))
        self._finish(CompleteRead(self.entry_id, bookie))

    def _on_failed(self, bookie: str, kind: BookieFailure) -> None:
        self._answers[bookie] = kind
        if self._deny_is_failure or not kind.holds_nothing:
            self._emit(RecordHealth(bookie, Health.FAILED))

    def _on_tick(self) -> None:
        expired = [
            b for b in self._outstanding() if self._now_s - self._sent_s[b] >= self._timeout_s
        ]
        for bookie in expired:
            self._on_failed(bookie, BookieFailure.TIMEOUT)
        if expired:
            self._after_failures()
        due = self._speculation_due_s()
        if not self._done and due is not None and self._now_s >= due:
            self._send_next()

    def _after_failures(self) -> None:
        denials = sum(
            1 for a in self._answers.values() if isinstance(a, BookieFailure) and a.holds_nothing
        )
        replicas = bookie_list(self._order)
        if denials >= self._missing_quorum:
            self._finish(
                FailRead(
                    self.entry_id,
                    ReadFailure.MISSING,
                    f"entry {self.entry_id}: {denials} of replicas {replicas} hold no copy "
                    f"({self._missing_quorum} denials conclude it); {self.describe_answers()}",
                )
            )
        elif not self._outstanding():
            if self._next < len(self._order):
                self._send_next()
            else:
                self._finish(
                    FailRead(
                        self.entry_id,
                        ReadFailure.UNAVAILABLE,
                        f"entry {self.entry_id}: no replica of {replicas} returned a valid "
                        f"copy; {self.describe_answers()}",
                    )
                )

    def _speculation_due_s(self) -> float | None:
        """When order[next] is due to be asked speculatively (None: no speculation)."""
        last = self._next - 1
        if self._parallel or self._next >= len(self._order) or last >= len(self._delays_s):
            return None
        if not self._outstanding():
            return None
        return self._last_sent_s + self._delays_s[last]

    def _send_next(self) -> None:
        bookie = self._order[self._next]
        self._next += 1
        self._sent_s[bookie] = self._now_s
        self._last_sent_s = self._now_s
        self._emit(SendRead(self.entry_id, bookie, self._fence))

    def _outstanding(self) -> list[str]:
        return [b for b in self._sent_s if b not in self._answers]

    def _is_outstanding(self, bookie: str) -> bool:
        return bookie in self._sent_s and bookie not in self._answers

    def _finish(self, action: CompleteRead | FailRead) -> None:
        self._emit(action)
        self._done = True
        self._outbox.seal()

    def _emit(self, action: ReadAction) -> None:
        self._outbox.emit(action)

    def describe_answers(self) -> str:
        """Each replica's answer in read order: 'b1 timeout, b0 digest_mismatch, b2 not asked'."""
        parts = []
        for bookie in self._order:
            answer = self._answers.get(bookie)
            if bookie not in self._sent_s:
                parts.append(f"{bookie} not asked")
            elif answer is None:
                parts.append(f"{bookie} no answer")
            else:
                parts.append(f"{bookie} {answer if isinstance(answer, str) else answer.value}")
        return ", ".join(parts)

    def validate(self) -> None:
        assert set(self._sent_s) == set(self._order[: self._next]), (self._sent_s, self._next)
        assert set(self._answers) <= set(self._sent_s), "an answer from a replica not asked"
        assert not self._parallel or self._next == len(self._order), "parallel read held back"
        successes = [b for b, a in self._answers.items() if a == _OK]
        assert len(successes) <= 1, successes
        if self._done:
            assert self._outbox.sealed, "finished but still emitting"
            return
        assert not successes, "a valid copy arrived but the read did not complete"
        assert self._outstanding(), "nothing outstanding and the read neither failed nor moved on"
