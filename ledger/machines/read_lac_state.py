"""Reading (and optionally fencing) a ledger's LAC from its ensemble: a pure state machine.

BookKeeper's ReadLastConfirmedOp and TryReadLastConfirmedOp, sans-IO. Every bookie of the
ensemble is asked for its last entry (READ of entry -1, with FENCE_LEDGER when fencing); each
answer gives the LAC piggybacked on that entry. The read completes with the highest LAC once
the answers reach quorum coverage: in every write-quorum window, fewer than `ack_quorum`
bookies are unknown (no answer yet, or an error other than "holds nothing"). Then no entry
can have been acked by bookies we did not hear from, and, when fencing, no write quorum can
accept another normal add.

A reply whose body fails its digest still counts for coverage (the bookie answered, and
fenced), but gives no LAC: a corrupt replica lowers our view of the LAC, never raises it.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

from ledger.codecs.metadata import write_set_indices
from ledger.codes import INVALID_ENTRY_ID
from ledger.machines.signals import (
    READ_TIMEOUT_S,
    BookieFailure,
    Health,
    Outbox,
    RecordHealth,
    Ticked,
    bookie_list,
)


def write_quorum_windows(ensemble_size: int, write_quorum: int) -> Iterator[tuple[int, ...]]:
    """Every distinct write set of round-robin striping (one when W == E)."""
    for start in range(ensemble_size if write_quorum < ensemble_size else 1):
        yield write_set_indices(start, ensemble_size, write_quorum)


def quorum_covered(
    unknown: Collection[int], ensemble_size: int, write_quorum: int, ack_quorum: int
) -> bool:
    """True when every write-quorum window has fewer than `ack_quorum` positions in `unknown`."""
    return all(
        sum(index in unknown for index in window) < ack_quorum
        for window in write_quorum_windows(ensemble_size, write_quorum)
    )


# ---------------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class LacReplied:
    """`bookie`'s last entry carries `lac`; `length` is the ledger length through that entry."""

    bookie: str
    lac: int
    length: int


@dataclass(frozen=True, slots=True)
class LacReadFailed:
    bookie: str
    kind: BookieFailure


LacEvent = LacReplied | LacReadFailed | Ticked

# --------------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class SendReadLac:
    """READ entry -1 (LAST_ADD_CONFIRMED) from `bookie`; with FENCE_LEDGER when `fence`."""

    bookie_index: int
    bookie: str
    fence: bool


@dataclass(frozen=True, slots=True)
class CompleteReadLac:
    lac: int  # INVALID_ENTRY_ID (-1) when no bookie holds an entry
    length: int  # from the same reply as `lac` (through that bookie's last entry)


class LacReadFailure(enum.Enum):
    UNAUTHORIZED = "unauthorized"  # a bookie refused the ledger password or the client
    NO_COVERAGE = "no_coverage"  # too many bookies failed for quorum coverage


@dataclass(frozen=True, slots=True)
class FailReadLac:
    reason: LacReadFailure
    message: str


LacAction = SendReadLac | CompleteReadLac | FailReadLac | RecordHealth


@dataclass(frozen=True, slots=True)
class _Lac:
    lac: int
    length: int


class ReadLacState:
    """One LAC read over one ensemble. `try_above`: complete as soon as a reply's LAC is
    higher than it (tryReadLastConfirmed); otherwise wait for quorum coverage."""

    def __init__(
        self,
        ensemble: Sequence[str],
        write_quorum: int,
        ack_quorum: int,
        *,
        now_s: float = 0.0,
        fence: bool = False,
        try_above: int | None = None,
        timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        assert 1 <= ack_quorum <= write_quorum <= len(ensemble), (ensemble, write_quorum)
        assert timeout_s > 0, timeout_s
        self._ensemble = tuple(ensemble)
        self._positions = {bookie: i for i, bookie in enumerate(self._ensemble)}
        assert len(self._positions) == len(self._ensemble), f"repeated bookie: {ensemble}"
        self._write_quorum = write_quorum
        self._ack_quorum = ack_quorum
        self._fence = fence
        self._try_above = try_above
        self._timeout_s = timeout_s
        self._now_s = now_s
        self._answers: dict[int, _Lac | BookieFailure] = {}
        self._sent_s = {i: now_s for i in range(len(self._ensemble))}  # unanswered
        self._best = _Lac(INVALID_ENTRY_ID, 0)
        self._done = False
        self._outbox: Outbox[LacAction] = Outbox()
        for i, bookie in enumerate(self._ensemble):
            self._emit(SendReadLac(i, bookie, fence))

    @property
    def done(self) -> bool:
        return self._done

    @property
    def lac(self) -> int:
        """The highest LAC heard so far."""
        return self._best.lac

    def next_wakeup_s(self) -> float | None:
        if self._done or not self._sent_s:
            return None
        return min(self._sent_s.values()) + self._timeout_s

    def take_actions(self) -> list[LacAction]:
        return self._outbox.take()

    def handle(self, event: LacEvent) -> None:
        if isinstance(event, Ticked):
            assert event.now_s >= self._now_s, (event.now_s, self._now_s)
            self._now_s = event.now_s
        if self._done:
            return
        match event:
            case LacReplied():
                index = self._positions.get(event.bookie)
                if index is not None and index in self._sent_s:
                    self._on_replied(index, _Lac(event.lac, event.length))
            case LacReadFailed():
                index = self._positions.get(event.bookie)
                if index is not None and index in self._sent_s:
                    self._on_failed(index, event.kind)
                    self._check()
            case Ticked():
                expired = [i for i, s in self._sent_s.items() if self._now_s - s >= self._timeout_s]
                for index in expired:
                    self._on_failed(index, BookieFailure.TIMEOUT)
                if expired:
                    self._check()

    def _on_replied(self, index: int, reply: _Lac) -> None:
        del self._sent_s[index]
        self._answers[index] = reply
        if reply.lac > self._best.lac:
            self._best = reply
            if self._try_above is not None and reply.lac > self._try_above:
                self._finish(CompleteReadLac(reply.lac, reply.length))
                return
        self._check()

    def _on_failed(self, index: int, kind: BookieFailure) -> None:
        del self._sent_s[index]
        self._answers[index] = kind
        if not kind.holds_nothing:
            self._emit(RecordHealth(self._ensemble[index], Health.FAILED))
        if kind is BookieFailure.UNAUTHORIZED:
            self._finish(
                FailReadLac(
                    LacReadFailure.UNAUTHORIZED,
                    f"{self._what()}: bookie {self._ensemble[index]} refused the ledger password "
                    "or this client's certificate",
                )
            )

    def _unknown(self) -> set[int]:
        """Positions that may hold entries we know nothing of."""
        return {i for i in range(len(self._ensemble)) if not self._answered_usably(i)}

    def _answered_usably(self, index: int) -> bool:
        answer = self._answers.get(index)
        if answer is None:
            return False
        if isinstance(answer, _Lac):
            return True
        return answer.holds_nothing or answer is BookieFailure.DIGEST_MISMATCH

    def _check(self) -> None:
        if self._done:
            return
        size = len(self._ensemble)
        if quorum_covered(self._unknown(), size, self._write_quorum, self._ack_quorum):
            self._finish(CompleteReadLac(self._best.lac, self._best.length))
            return
        failed = {i for i in self._answers if not self._answered_usably(i)}
        for window in write_quorum_windows(size, self._write_quorum):
            lost = [i for i in window if i in failed]
            if len(lost) >= self._ack_quorum:
                if self._try_above is not None and self._best.lac > INVALID_ENTRY_ID:
                    self._finish(CompleteReadLac(self._best.lac, self._best.length))
                    return
                names = bookie_list(self._ensemble[i] for i in window)
                self._finish(
                    FailReadLac(
                        LacReadFailure.NO_COVERAGE,
                        f"{self._what()}: no quorum coverage: {len(lost)} bookies of write set "
                        f"{names} failed (ack quorum {self._ack_quorum}), so an entry acked "
                        f"there could be missed; answers: {self.describe_answers()}",
                    )
                )
                return

    def _finish(self, action: CompleteReadLac | FailReadLac) -> None:
        self._emit(action)
        self._done = True
        self._outbox.seal()

    def _emit(self, action: LacAction) -> None:
        self._outbox.emit(action)

    def _what(self) -> str:
        verb = "fencing" if self._fence else "reading the LAC of"
        return f"{verb} ensemble {bookie_list(self._ensemble)}"

    def describe_answers(self) -> str:
        """Each bookie's answer, in ensemble order: 'b0 lac=3 length=40, b1 timeout, ...'."""
        parts = []
        for index, bookie in enumerate(self._ensemble):
            answer = self._answers.get(index)
            if answer is None:
                parts.append(f"{bookie} no answer")
            elif isinstance(answer, _Lac):
                parts.append(f"{bookie} lac={answer.lac} length={answer.length}")
            else:
                parts.append(f"{bookie} {answer.value}")
        return ", ".join(parts)

    def validate(self) -> None:
        assert not set(self._answers) & set(self._sent_s), "answered and outstanding"
        assert set(self._answers) | set(self._sent_s) == set(range(len(self._ensemble)))
        replies = [a.lac for a in self._answers.values() if isinstance(a, _Lac)]
        assert self._best.lac == max(replies, default=INVALID_ENTRY_ID), (self._best, replies)
        if self._done:
            assert self._outbox.sealed, "finished but still emitting"
        else:
            size = len(self._ensemble)
            covered = quorum_covered(self._unknown(), size, self._write_quorum, self._ack_quorum)
            assert not covered, "quorum coverage reached but the read did not complete"
