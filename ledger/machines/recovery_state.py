"""Recovering a ledger its writer left open: fence, find the end, re-replicate, close. Pure.

BookKeeper's LedgerRecoveryOp, sans-IO. The driver has already set the metadata to
IN_RECOVERY; this machine then:

1. fences every bookie of the last ensemble and reads their LAC (`ReadLacState` with fence)
   until quorum coverage holds; LAC = max(highest LAC heard, first entry of the last
   ensemble - 1), since earlier ensembles are complete and immutable;
2. reads forward LAC+1, LAC+2, ... with fencing recovery reads (the TLA+-found fix: reads
   fence too) sent to the whole write set at once, ahead of the re-adds by a window that
   starts at 2 and doubles with each recovered entry, up to `entries_in_flight_max`. One
   good copy recovers an entry; W - A + 1 denials prove it was never acknowledged and end
   the ledger just before it (later entries are dropped);
3. re-adds each recovered entry in order with RECOVERY_ADD through an embedded `AddState`
   that waits for the full write quorum; its ensemble changes are not persisted at once
   (`ChangeEnsemble.persist` is False) but written with the close, as BookKeeper does;
4. emits `CloseLedger(last_entry_id, length, ensembles)` once every re-add completed.

Lengths are exact: the ledger length through the LAC comes from the first recovered entry's
header (its length minus its payload), or, when nothing follows the LAC, from reading the
LAC entry itself (BookKeeper takes the LAC reply's length, which counts through the
replying bookie's last entry and can overshoot). Errors that cannot be tolerated (no quorum
coverage, an entry no replica can serve, a failed re-add) emit `FailRecovery` with each
bookie's answer; the ledger stays IN_RECOVERY and recovery can be retried.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from ledger.codecs.metadata import Ensemble, LedgerMetadata, LedgerState, write_set_indices
from ledger.codes import INVALID_ENTRY_ID
from ledger.machines.add_events import (
    AddAcked,
    AddFailed,
    ChangeEnsemble,
    CloseLedger,
    CompleteAdds,
    EnsembleChanged,
    EnsembleChangeFailed,
    FailAdds,
    SendAdd,
)
from ledger.machines.add_state import AddConfig, AddState
from ledger.machines.read_lac_state import (
    CompleteReadLac,
    FailReadLac,
    LacReadFailed,
    LacReplied,
    ReadLacState,
)
from ledger.machines.read_state import (
    CompleteRead,
    EntryRead,
    EntryReadFailed,
    EntryReadState,
    FailRead,
    ReadFailure,
)
from ledger.machines.recovery_events import FailRecovery, RecoveryAction, RecoveryEvent
from ledger.machines.signals import READ_TIMEOUT_S, Outbox, Ticked

RECOVERY_ENTRIES_IN_FLIGHT_MAX = 64  # read ahead of the last re-added entry, bounds memory


@dataclass(frozen=True, slots=True)
class RecoveryConfig:
    read_timeout_s: float = READ_TIMEOUT_S
    entries_in_flight_max: int = RECOVERY_ENTRIES_IN_FLIGHT_MAX
    add: AddConfig = field(default_factory=AddConfig)

    def __post_init__(self) -> None:
        assert self.read_timeout_s > 0, self.read_timeout_s
        assert 0 < self.entries_in_flight_max <= self.add.pending_adds_max, self


class _Phase(enum.Enum):
    FENCING = "fencing"
    READING = "reading"  # reading forward and re-adding
    CLOSED = "closed"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class _Found:
    payload_len: int
    length: int  # through the entry, from its header


class RecoveryState:
    """One recovery of one ledger. Feed `handle`; drain `take_actions()` after each call."""

    def __init__(
        self,
        metadata: LedgerMetadata,
        *,
        now_s: float = 0.0,
        config: RecoveryConfig | None = None,
        failed_since: Mapping[str, float] | None = None,
    ) -> None:
        """`failed_since`: bookies this client saw fail before the recovery (another handle's
        ensemble change, a read), each with when, and answering nothing since."""
        assert metadata.state is not LedgerState.CLOSED, "a closed ledger needs no recovery"
        self.config = config if config is not None else RecoveryConfig()
        self._metadata = metadata
        last = metadata.ensembles[-1]
        self._ensemble = last.bookies
        self._first_entry_id = last.first_entry_id
        self._now_s = now_s
        self._phase = _Phase.FENCING
        self._fenced_s = now_s  # when the fences were asked
        self._failed_since = dict(failed_since or {})
        self._heard: set[str] = set()  # bookies that answered anything of this recovery
        self._lac_read = ReadLacState(
            last.bookies,
            metadata.write_quorum,
            metadata.ack_quorum,
            now_s=now_s,
            fence=True,
            timeout_s=self.config.read_timeout_s,
        )
        self._start_lac = INVALID_ENTRY_ID  # the LAC recovery starts from, once fenced
        self._next_read = 0  # the next entry to start reading
        # Read-ahead starts at two entries and doubles with every recovered entry, up to the
        # configured max. The tail after a crash is usually short (each read costs W
        # requests), but it is rarely empty: the last entry a writer sent is beyond the LAC
        # its bookies know until a later entry carries it. Reading LAC+1 and LAC+2 at once
        # finds that entry and the end in one round trip, not two (a WAN round trip off
        # every owner failover).
        self._window = min(2, self.config.entries_in_flight_max)
        self._next_resolve = 0  # the next entry to re-add (or find missing), in order
        self._first_missing: int | None = None  # read no further than this
        self._end: int | None = None  # the last entry of the ledger, once known
        self._reads: dict[int, EntryReadState] = {}
        self._outcomes: dict[int, _Found | FailRead] = {}  # resolved out of order
        self._adds: AddState | None = None  # made at the first recovered entry
        self._probe: EntryReadState | None = None  # reads the LAC entry for its length
        self._outbox: Outbox[RecoveryAction] = Outbox()
        self._pull_lac_read()

    @property
    def is_terminal(self) -> bool:
        return self._phase in (_Phase.CLOSED, _Phase.FAILED)

    def next_wakeup_s(self) -> float | None:
        machines: list[ReadLacState | EntryReadState | AddState | None] = [
            self._lac_read,
            self._probe,
            self._adds,
            *self._reads.values(),
        ]
        times = [m.next_wakeup_s() for m in machines if m is not None]
        return min((t for t in times if t is not None), default=None)

    def take_actions(self) -> list[RecoveryAction]:
        return self._outbox.take()

    def wants_ack_time(self, entry_id: int) -> bool:
        """Whether an ack of `entry_id`'s re-add would be its first (the driver stamps the
        clock before feeding it: the quorum lag counts from the first ack)."""
        return self._adds is not None and self._adds.wants_ack_time(entry_id)

    def handle(self, event: RecoveryEvent) -> None:
        if isinstance(event, Ticked):
            assert event.now_s >= self._now_s, (event.now_s, self._now_s)
            self._now_s = event.now_s
        if self.is_terminal:
            return
        if isinstance(event, LacReplied | EntryRead) or (
            isinstance(event, LacReadFailed | EntryReadFailed) and event.kind.answered
        ):
            self._heard_from(event.bookie)
        match event:
            case LacReplied() | LacReadFailed():
                self._lac_read.handle(event)
                self._pull_lac_read()
            case EntryRead() | EntryReadFailed():
                self._on_read_event(event)
            case AddAcked() | AddFailed() | EnsembleChanged() | EnsembleChangeFailed():
                assert self._adds is not None, f"{event} before any re-add"
                self._adds.handle(event)
                self._pull_adds()
            case Ticked():
                self._on_tick(event)

    def _heard_from(self, bookie: str) -> None:
        if bookie not in self._heard:
            self._heard.add(bookie)
            if self._adds is not None:
                self._adds.heard_from(bookie)

    # ----------------------------------------------------------------- fencing (phase 1)

    def _pull_lac_read(self) -> None:
        for action in self._lac_read.take_actions():
            match action:
                case CompleteReadLac():
                    self._fenced(action.lac)
                case FailReadLac():
                    self._fail(f"recovery: {action.message}")
                case _:
                    self._emit(action)

    def _fenced(self, lac: int) -> None:
        self._start_lac = max(lac, self._first_entry_id - 1)
        self._next_read = self._next_resolve = self._start_lac + 1
        self._phase = _Phase.READING
        self._read_ahead()

    # ------------------------------------------------------------ reading forward (2, 3)

    def _read_ahead(self) -> None:
        base = self._adds.lac if self._adds is not None else self._start_lac
        size, write_quorum = len(self._ensemble), self._metadata.write_quorum
        while (
            self._end is None
            and self._next_read <= base + self._window
            and (self._first_missing is None or self._next_read < self._first_missing)
        ):
            entry_id = self._next_read
            self._next_read += 1
            order = [self._ensemble[i] for i in write_set_indices(entry_id, size, write_quorum)]
            read = EntryReadState(
                entry_id,
                order,
                now_s=self._now_s,
                timeout_s=self.config.read_timeout_s,
                fence=True,
                parallel=True,
                missing_quorum=write_quorum - self._metadata.ack_quorum + 1,
            )
            self._reads[entry_id] = read
            self._route_read(read, None)

    def _on_read_event(self, event: EntryRead | EntryReadFailed) -> None:
        if self._probe is not None and event.entry_id == self._probe.entry_id:
            self._probe.handle(event)
            self._pull_probe(event)
            return
        read = self._reads.get(event.entry_id)
        if read is not None:  # else: resolved already, or beyond the end
            read.handle(event)
            self._route_read(read, event)
            self._advance()

    def _route_read(self, read: EntryReadState, event: EntryRead | EntryReadFailed | None) -> None:
        for action in read.take_actions():
            match action:
                case CompleteRead():
                    assert isinstance(event, EntryRead) and event.bookie == action.bookie, event
                    self._emit(action)
                    self._outcomes[read.entry_id] = _Found(event.payload_len, event.length)
                case FailRead():
                    self._outcomes[read.entry_id] = action
                    if action.reason is ReadFailure.MISSING and (
                        self._first_missing is None or action.entry_id < self._first_missing
                    ):
                        self._first_missing = action.entry_id
                case _:
                    self._emit(action)
        if read.done:
            del self._reads[read.entry_id]

    def _advance(self) -> None:
        """Act on resolved entries in entry order: re-add, end, or fail."""
        while self._phase is _Phase.READING and self._end is None:
            outcome = self._outcomes.pop(self._next_resolve, None)
            if outcome is None:
                break
            if isinstance(outcome, _Found):
                self._re_add(self._next_resolve, outcome)
                self._next_resolve += 1
                self._window = min(2 * self._window, self.config.entries_in_flight_max)
            elif outcome.reason is ReadFailure.MISSING:
                self._end = self._next_resolve - 1
                self._reads.clear()  # entries after a never-acknowledged one are dropped
                self._outcomes.clear()
            else:
                self._fail(f"recovery: {outcome.message}")
        if self._phase is _Phase.READING:
            self._read_ahead()
            self._maybe_close()

    def _re_add(self, entry_id: int, found: _Found) -> None:
        if self._adds is None:
            # A bookie that has answered nothing, not even its fence, is silent since it was
            # asked, or since this client saw it fail before (a region cut off for seconds
            # before its stream's recovery): its quorum lag counts from then, not from the
            # first re-add's first ack.
            self._adds = AddState(
                self._ensemble,
                self._metadata.write_quorum,
                self._metadata.ack_quorum,
                lac=self._start_lac,
                length=max(0, found.length - found.payload_len),
                recovery=True,
                now_s=self._now_s,
                config=self.config.add,
                silent_since={
                    i: min(self._fenced_s, self._failed_since.get(bookie, self._fenced_s))
                    for i, bookie in enumerate(self._ensemble)
                    if bookie not in self._heard
                },
            )
        expected = self._adds.pushed_length + found.payload_len
        if found.length != expected:
            self._fail(
                f"recovery: entry {entry_id} says the ledger is {found.length} bytes through it, "
                f"but the entries before it and its {found.payload_len}-byte payload make "
                f"{expected}"
            )
            return
        submitted = self._adds.submit(found.payload_len)
        assert submitted == entry_id, (submitted, entry_id)
        self._pull_adds()

    def _pull_adds(self) -> None:
        assert self._adds is not None
        for action in self._adds.take_actions():
            match action:
                case FailAdds():
                    first, last = action.entry_ids[0], action.entry_ids[-1]
                    self._fail(
                        f"recovery: re-adding entries {first}..{last} failed: "
                        f"{action.error.message}"
                    )
                    return
                case SendAdd() | ChangeEnsemble() | CompleteAdds():
                    self._emit(action)
                case _:
                    raise AssertionError(f"recovery never closes its AddState: {action}")
        if self._phase is _Phase.READING:
            self._read_ahead()
            self._maybe_close()

    # --------------------------------------------------------------------- closing (4)

    def _maybe_close(self) -> None:
        end = self._end
        if self._phase is not _Phase.READING or end is None:
            return
        if self._adds is not None:
            if self._adds.lac == end:
                self._close(end, self._adds.length, self._adds.unpersisted_ensembles)
        elif end == INVALID_ENTRY_ID:
            self._close(end, 0)
        elif self._probe is None:  # nothing followed the LAC: its header has the length
            ledger_order = self._metadata.write_set(end)
            self._probe = EntryReadState(
                end,
                ledger_order,
                now_s=self._now_s,
                timeout_s=self.config.read_timeout_s,
                parallel=True,
            )
            self._pull_probe(None)

    def _pull_probe(self, event: EntryRead | EntryReadFailed | None) -> None:
        assert self._probe is not None and self._end is not None
        for action in self._probe.take_actions():
            match action:
                case CompleteRead():
                    assert isinstance(event, EntryRead), event
                    self._close(self._end, event.length)
                case FailRead():
                    self._fail(
                        f"recovery: nothing follows entry {self._end} (the LAC), but reading it "
                        f"for the ledger length failed: {action.message}"
                    )
                case _:
                    self._emit(action)

    def _on_tick(self, tick: Ticked) -> None:
        if self._phase is _Phase.FENCING:
            self._lac_read.handle(tick)
            self._pull_lac_read()
            return
        for read in list(self._reads.values()):  # read ticks only record outcomes
            read.handle(tick)
            self._route_read(read, None)
        if self._probe is not None and not self.is_terminal:
            self._probe.handle(tick)
            self._pull_probe(None)
        if self._adds is not None and not self.is_terminal:
            self._adds.handle(tick)
            self._pull_adds()
        self._advance()

    def _close(self, last_entry_id: int, length: int, ensembles: tuple[Ensemble, ...] = ()) -> None:
        self._emit(CloseLedger(last_entry_id, length, ensembles))
        self._end_with(_Phase.CLOSED)

    def _fail(self, message: str) -> None:
        self._emit(FailRecovery(message))
        self._end_with(_Phase.FAILED)

    def _end_with(self, phase: _Phase) -> None:
        self._phase = phase
        self._outbox.seal()

    def _emit(self, action: RecoveryAction) -> None:
        self._outbox.emit(action)

    # ----------------------------------------------------------------------- invariants

    def validate(self) -> None:
        if self.is_terminal:
            assert self._outbox.sealed, "ended but still emitting"
            return
        self._lac_read.validate()
        if self._phase is _Phase.FENCING:
            assert not self._reads and self._adds is None and self._probe is None
            return
        assert self._start_lac >= self._first_entry_id - 1, self._start_lac
        assert self._next_resolve <= self._next_read, (self._next_resolve, self._next_read)
        waiting = set(self._reads) | set(self._outcomes)
        assert not set(self._reads) & set(self._outcomes), "read both running and resolved"
        assert all(self._next_resolve <= e < self._next_read for e in waiting), waiting
        base = self._adds.lac if self._adds is not None else self._start_lac
        assert self._window <= self.config.entries_in_flight_max, self._window
        assert self._next_read - base <= self._window + 1, "read ahead beyond the window"
        if self._adds is None:
            assert self._next_resolve == self._start_lac + 1, self._next_resolve
        else:
            assert self._adds.lap == self._next_resolve - 1, (self._adds.lap, self._next_resolve)
            self._adds.validate()
        if self._end is not None:
            assert self._end == self._next_resolve - 1 and not waiting, self._end
        for read in self._reads.values():
            read.validate()
        if self._probe is not None:
            self._probe.validate()
