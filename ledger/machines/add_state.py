"""The writer side of one ledger handle as a pure state machine: striping, acks, LAC, close.

Events in, actions out, no IO (BookKeeper's PendingAddOp and LedgerHandle, sans-IO):

- `submit(payload_len)` gives the next entry id and emits one `SendAdd` per bookie of the
  entry's write set (round-robin striping over the current ensemble).
- An entry completes once `ack_quorum` bookies of its write set acked it (the full write
  quorum for recovery adds) AND every earlier entry completed: `CompleteAdds` comes strictly
  in entry order and moves the LAC, which later entries piggyback (`SendAdd.lac`).
- A failed or timed-out bookie (other than fenced/unauthorized) starts one ensemble change:
  `ChangeEnsemble` from entry LAC+1. So does a silent bookie that holds up an ack quorum
  (recovery's re-adds too, whose quorum is the write quorum): when the oldest pending entry
  has some acks but not its quorum, each bookie it still waits for that has acknowledged
  nothing for `quorum_lag_s` since that entry's first ack is replaced. The change names the
  bookies that fell silent (`ChangeEnsemble.silent`), whose region mates placement picks
  last. A cut link or a stalled bookie answers nothing while its peers answer within a WAN
  round trip; a busy one (a saturated host, a queue of adds) keeps acknowledging earlier
  entries and is waited for; with no ack at all (a slow disk shared by all) nothing is.
  The new ensemble serves entries from the LAC+1 of the change's start. Completions go on
  during the change with acks from the positions it keeps only: such an entry is on those
  bookies under the old ensemble and the new one alike, so readers and a recovery find it
  whichever metadata they read (a cut bookie's change can wait a ZooKeeper election; its
  writes need not). Its payload stays (`CompleteAdds.keep_payloads`). On `EnsembleChanged`
  every pending entry, and every entry completed meanwhile, is sent to the replaced
  positions; a completed entry's send is its payload's last use (`SendAdd.last_use`), and
  one that owes no copy is forgotten (`ForgetPayloads`). Those copies are best effort: the
  entry was acknowledged with its ack quorum, as ever.
- Fenced, unauthorized, a failed ensemble change or a crashed driver task (`TaskCrashed`)
  end the handle: `FailAdds` for every pending entry and `FailClose` (so a close, asked
  before or after, ends with the error); later `submit` calls are refused (None) and
  `error` says why.
- `begin_close()` waits for pending adds, then emits `CloseLedger(last_entry_id=LAC, length)`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ledger.codecs.metadata import Ensemble, write_set_indices
from ledger.codes import INVALID_ENTRY_ID
from ledger.machines.add_events import (
    FATAL_ANSWERS,
    AddAcked,
    AddAction,
    AddError,
    AddErrorKind,
    AddEvent,
    AddFailed,
    ChangeEnsemble,
    CloseLedger,
    CompleteAdds,
    EnsembleChanged,
    EnsembleChangeFailed,
    FailAdds,
    FailClose,
    ForgetPayloads,
    SendAdd,
    SendSkipped,
    TaskCrashed,
)
from ledger.machines.add_sends import PENDING_ADDS_MAX, STRAGGLERS_MAX, SendDeadlines
from ledger.machines.signals import Outbox, Ticked

ADD_TIMEOUT_S = 5.0  # BK addEntryTimeoutSec: an unanswered add counts as a bookie failure
QUORUM_LAG_S = 0.5  # a bookie silent this long while it holds up an ack quorum is replaced
# Changes for silent bookies a handle makes at most; past it only failures and the add timeout
# replace bookies. A host saturated for minutes can make a bookie look silent now and then:
# each change is a metadata write and a longer ensemble history, so they are bounded, and
# running out of them never fails the handle.
LAG_CHANGES_MAX = 16
# Moves of healthy bookies (`respread`) a handle makes beyond one per change for a failed
# bookie: a move undoes what a region's loss did, so a region that comes and goes costs a
# ledger at most two metadata writes a round (and ENSEMBLE_CHANGES_MAX bounds those rounds).
RESPREAD_CHANGES_FREE = 2
ENSEMBLE_CHANGES_MAX = 64  # per handle; BK's default is unlimited, a flapping cluster is not


@dataclass(frozen=True, slots=True)
class AddConfig:
    add_timeout_s: float = ADD_TIMEOUT_S
    quorum_lag_s: float | None = QUORUM_LAG_S  # None: only add_timeout_s replaces bookies
    pending_adds_max: int = PENDING_ADDS_MAX
    ensemble_changes_max: int = ENSEMBLE_CHANGES_MAX

    def __post_init__(self) -> None:
        assert self.add_timeout_s > 0, self.add_timeout_s
        assert self.quorum_lag_s is None or self.quorum_lag_s > 0, self.quorum_lag_s
        assert self.pending_adds_max > 0, self.pending_adds_max
        assert self.ensemble_changes_max >= 0, self.ensemble_changes_max


class _Phase(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # begin_close() was called: waiting for the pending adds
    CLOSED = "closed"  # CloseLedger was emitted (terminal)
    FAILED = "failed"  # FailAdds was emitted for everything (terminal)


@dataclass(slots=True)
class _Pending:
    entry_id: int
    lac: int
    length: int
    write_set: tuple[int, ...]
    acked: set[int] = field(default_factory=set)  # ensemble positions
    sent_s: dict[int, float] = field(default_factory=dict)  # in flight: position -> sent at
    # the machine's clock when its first ack of the current ensemble came (None: no ack yet)
    first_ack_s: float | None = None


class AddState:
    """The adds of one ledger handle. Feed `submit`, `begin_close` and `handle`; drain
    `take_actions()` after each call and carry them out in order."""

    def __init__(
        self,
        ensemble: Sequence[str],
        write_quorum: int,
        ack_quorum: int,
        *,
        lac: int = INVALID_ENTRY_ID,
        length: int = 0,
        recovery: bool = False,
        now_s: float = 0.0,
        config: AddConfig | None = None,
        silent_since: Mapping[int, float] | None = None,
    ) -> None:
        """`silent_since`: positions whose bookie has answered nothing since the time given
        (a recovery's: not even its fence), whose quorum lag counts from then."""
        assert 1 <= ack_quorum <= write_quorum <= len(ensemble), (ensemble, write_quorum)
        assert lac >= INVALID_ENTRY_ID and length >= 0, (lac, length)
        self.config = config if config is not None else AddConfig()
        self._ensemble = tuple(ensemble)
        self._write_quorum = write_quorum
        # Recovery re-adds restore the full write quorum before the ledger is closed.
        self._acks_needed = write_quorum if recovery else ack_quorum
        self._recovery = recovery
        self._now_s = now_s
        self._lac = lac
        self._length = length  # through the LAC
        self._pushed_length = length  # through the last submitted entry
        self._next_entry_id = lac + 1
        self._pending: dict[int, _Pending] = {}
        in_flight_max = (self.config.pending_adds_max + STRAGGLERS_MAX) * write_quorum
        self._sends = SendDeadlines(self.config.add_timeout_s, in_flight_max, self._sent_s_of)
        self._phase = _Phase.OPEN
        self._changing: tuple[int, ...] | None = None  # positions of the change in progress
        self._changing_lagging = False  # that change replaces slow bookies only, none failed
        self._changing_respread = False  # that change moves a healthy bookie (`respread`)
        # position -> the machine's clock at its last ack (the quorum lag's silence)
        self._last_ack_s: dict[int, float] = {}
        self._silent_since = dict(silent_since or {})
        self._failed_later: set[int] = set()  # positions that failed during that change
        self._change_first = INVALID_ENTRY_ID  # the entry the change's new ensemble starts at
        # Entries completed during the change (acked by the positions it keeps), in order:
        # their copies for the replaced positions are sent once it lands.
        self._owed: dict[int, _Pending] = {}
        # positions whose bookie fell silent (timed out, lagged, too many stragglers) rather
        # than answered a failure: a cut link, whose region mates are likely behind it too
        self._silent: set[int] = set()
        self._changes = 0  # for failed bookies
        self._lag_changes = 0  # for silent ones
        self._respreads = 0  # moves of healthy bookies that changed the ensemble
        self._new_ensembles: tuple[Ensemble, ...] = ()  # recovery's, in entry order
        self._error: AddError | None = None
        self._outbox: Outbox[AddAction] = Outbox()

    # ------------------------------------------------------------------------ observers

    @property
    def lac(self) -> int:
        """Last add confirmed: entries 0..lac completed."""
        return self._lac

    @property
    def lap(self) -> int:
        """Last add pushed: the highest entry id handed out."""
        return self._next_entry_id - 1

    @property
    def length(self) -> int:
        """The ledger's length through the LAC."""
        return self._length

    @property
    def pushed_length(self) -> int:
        return self._pushed_length

    @property
    def ensemble(self) -> tuple[str, ...]:
        return self._ensemble

    @property
    def unpersisted_ensembles(self) -> tuple[Ensemble, ...]:
        """Recovery only: the ensembles changed to, which the closing metadata write adds."""
        return self._new_ensembles

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def room(self) -> int:
        """How many more adds `submit` takes now; 0 means wait for a completion (or for a
        change to land: entries completed during it keep their payloads until then)."""
        return self.config.pending_adds_max - len(self._pending) - len(self._owed)

    @property
    def error(self) -> AddError | None:
        """Why `submit` refuses: the failure, or CLOSED once closing; None while open."""
        if self._phase in (_Phase.CLOSING, _Phase.CLOSED):
            return AddError(AddErrorKind.CLOSED, f"the ledger handle is {self._phase.value}")
        return self._error

    @property
    def is_terminal(self) -> bool:
        return self._phase in (_Phase.CLOSED, _Phase.FAILED)

    def next_wakeup_s(self) -> float | None:
        """When the next add times out or the oldest entry's ack quorum has lagged too long
        (tick then), or None when nothing is in flight."""
        timeout_s = self._sends.next_wakeup_s()
        lag_s = self._quorum_lag_deadline_s()
        if lag_s is None or (timeout_s is not None and timeout_s <= lag_s):
            return timeout_s
        return lag_s

    def _quorum_lag_deadline_s(self) -> float | None:
        """When the oldest pending entry's ack quorum counts as held up, if it has begun."""
        # Asked after every answer (the runner's wake-up), so `_silent_from_s` is inlined.
        lag_s = self.config.quorum_lag_s
        if lag_s is None or self._changing is not None:
            return None
        if self._lag_changes >= LAG_CHANGES_MAX:
            return None
        head = self._pending.get(self._lac + 1)
        if head is None or len(head.acked) >= self._acks_needed:
            return None
        first_s = head.first_ack_s
        if first_s is None or not head.sent_s:  # nothing in flight: the failures' change does it
            return None
        silent_since = self._silent_since
        last_ack_s = self._last_ack_s
        earliest_s = math.inf
        for index in head.sent_s:
            since_s = silent_since.get(index)
            if since_s is None:
                since_s = last_ack_s.get(index, first_s)
                since_s = max(since_s, first_s)
            earliest_s = min(earliest_s, since_s)
        return earliest_s + lag_s

    def _silent_from_s(self, head: _Pending, index: int) -> float:
        """Since when the bookie at `index` has acknowledged nothing, as far as `head` counts."""
        assert head.first_ack_s is not None
        since = self._silent_since.get(index)
        if since is not None:  # never heard from since well before this entry
            return since
        return max(head.first_ack_s, self._last_ack_s.get(index, head.first_ack_s))

    def failed_since(self, bookie: str, since_s: float) -> None:
        """This client saw `bookie` fail at `since_s` elsewhere (a recovery, another handle):
        unless it has acknowledged something of this handle, its quorum lag counts from then,
        not from an entry's first ack."""
        for index, member in enumerate(self._ensemble):
            if member == bookie and index not in self._last_ack_s:
                self._silent_since[index] = min(since_s, self._silent_since.get(index, since_s))

    def heard_from(self, bookie: str) -> None:
        """`bookie` answered something else (a recovery's read): no longer silent since
        `silent_since`; its quorum lag counts from entries' first acks again."""
        for index, member in enumerate(self._ensemble):
            if member == bookie:
                self._silent_since.pop(index, None)

    def wants_ack_time(self, entry_id: int) -> bool:
        """Whether an ack of `entry_id` would be its first: the driver stamps the clock
        (Ticked) before feeding it, as the quorum lag counts from the first ack."""
        if self.config.quorum_lag_s is None:
            return False
        pending = self._pending.get(entry_id)
        return pending is not None and pending.first_ack_s is None

    def _sent_s_of(self, entry_id: int) -> dict[int, float] | None:
        pending = self._pending.get(entry_id)
        return None if pending is None else pending.sent_s

    def take_actions(self) -> list[AddAction]:
        return self._outbox.take()

    # --------------------------------------------------------------------------- inputs

    def submit(self, payload_len: int) -> int | None:
        """The new entry's id, or None when the handle refuses adds (see `error`).

        The driver must respect `room` (backpressure): submitting beyond it is a bug.
        """
        assert payload_len >= 0, payload_len
        if self._phase is not _Phase.OPEN:
            return None
        assert self.room > 0, f"submit beyond {self.config.pending_adds_max} pending adds"
        entry_id = self._next_entry_id
        self._next_entry_id += 1
        self._pushed_length += payload_len
        ws = write_set_indices(entry_id, len(self._ensemble), self._write_quorum)
        pending = _Pending(entry_id, self._lac, self._pushed_length, ws)
        self._pending[entry_id] = pending
        failed = self._known_failed()
        for index in ws:
            if index not in failed:  # sent once the change replaces it
                self._send(pending, index)
        return entry_id

    def respread(self, index: int) -> bool:
        """Starts a change moving the bookie at `index` elsewhere though nothing failed (the
        driver's placement wants the ensemble over one more region); whether it started.
        Only where the other positions of every write set make the ack quorum, so the
        writes go on while it lands; never while a bookie of the ensemble is known silent
        (`failed_since`; the driver asks only when every member answers); at most
        one per change for a failed bookie, plus RESPREAD_CHANGES_FREE, that change
        something."""
        assert 0 <= index < len(self._ensemble), index
        if self._phase is not _Phase.OPEN or self._changing is not None or self._recovery:
            return False
        if self._write_quorum - 1 < self._acks_needed or self._silent_since:
            return False
        if self._respreads >= self._changes + RESPREAD_CHANGES_FREE:
            return False
        self._start_change({index}, respread=True)
        return True

    def begin_close(self) -> None:
        """Close once every pending add completed. No-op if closing, closed or failed."""
        if self._phase is _Phase.OPEN:
            self._phase = _Phase.CLOSING
            self._maybe_close()

    def handle(self, event: AddEvent) -> None:
        if isinstance(event, Ticked):
            assert event.now_s >= self._now_s, f"time went back: {event.now_s} < {self._now_s}"
            self._now_s = event.now_s
        if self.is_terminal:
            return  # late answers to a finished handle change nothing
        match event:
            case AddAcked():
                self._on_acked(event)
            case AddFailed():
                self._on_failed(event)
            case EnsembleChanged():
                self._on_ensemble_changed(event)
            case EnsembleChangeFailed():
                self._on_change_failed(event)
            case SendSkipped():
                self._on_skipped(event)
            case TaskCrashed():
                self._fail(
                    AddError(AddErrorKind.INTERNAL, f"a writer task crashed: {event.reason}")
                )
            case Ticked():
                self._on_tick()

    # --------------------------------------------------------------------------- events

    def _on_acked(self, event: AddAcked) -> None:
        pending = self._pending.get(event.entry_id)
        index = self._position(pending, event.bookie)
        if pending is None or index is None:
            late = self._straggler_answered(event.entry_id, event.bookie)
            if late is not None and self._ensemble[late] == event.bookie:
                self._last_ack_s[late] = self._now_s  # slow, but not silent
                self._silent_since.pop(late, None)
            return  # completed already, or the bookie was replaced: a stale answer
        pending.sent_s.pop(index, None)
        pending.acked.add(index)
        self._last_ack_s[index] = self._now_s
        self._silent_since.pop(index, None)
        if pending.first_ack_s is None:
            pending.first_ack_s = self._now_s
        self._complete_ready()

    def _on_failed(self, event: AddFailed) -> None:
        pending = self._pending.get(event.entry_id)
        index = self._position(pending, event.bookie)
        if pending is None or index is None:
            index = self._straggler_answered(event.entry_id, event.bookie)
            if index is None:
                return
        fatal = FATAL_ANSWERS.get(event.kind)
        if fatal is not None:
            kind, why = fatal
            where = f"entry {event.entry_id}: bookie {event.bookie} answered {event.kind.value}"
            self._fail(AddError(kind, f"{where}: {why}"))
        else:  # any other failure: replace the bookie
            if pending is not None:
                pending.sent_s.pop(index, None)
            if event.kind.answered:
                self._silent.discard(index)
                self._silent_since.pop(index, None)
            else:  # no answer (a connection lost or stalled): likely a cut, as a timeout
                self._silent.add(index)
            self._positions_failed({index})

    def _on_skipped(self, event: SendSkipped) -> None:
        pending = self._pending.get(event.entry_id)
        index = self._position(pending, event.bookie)
        if pending is None or index is None:
            self._straggler_answered(event.entry_id, event.bookie)
        else:
            pending.sent_s.pop(index, None)

    def _straggler_answered(self, entry_id: int, bookie: str) -> int | None:
        """Forgets a completed entry's outstanding send to `bookie`; its position, if any."""
        return self._sends.straggler_answered(entry_id, lambda i: self._ensemble[i] == bookie)

    def _on_tick(self) -> None:
        expired = self._sends.expire(self._now_s)
        lagging = self._holding_up_the_quorum() - expired
        if expired or lagging:  # one ensemble change for every position on this tick
            self._silent |= expired | lagging
            self._positions_failed(expired | lagging, lagging_only=not expired)

    def _holding_up_the_quorum(self) -> set[int]:
        """The silent positions the oldest entry still waits for, once its quorum lagged."""
        deadline_s = self._quorum_lag_deadline_s()
        if deadline_s is None or self._now_s < deadline_s:
            return set()
        head = self._pending[self._lac + 1]
        lag_s = self.config.quorum_lag_s
        assert lag_s is not None
        return {i for i in head.sent_s if self._silent_from_s(head, i) + lag_s <= self._now_s}

    def _on_ensemble_changed(self, event: EnsembleChanged) -> None:
        assert self._changing is not None, "EnsembleChanged without a ChangeEnsemble"
        assert event.first_entry_id == self._change_first, (event, self._change_first)
        assert len(set(event.ensemble)) == len(self._ensemble), f"bad ensemble {event.ensemble}"
        changed = {i for i, bookie in enumerate(event.ensemble) if bookie != self._ensemble[i]}
        asked = self._changing
        if not changed and self._changing_lagging:
            self._lag_changes -= 1  # no better bookie for a silent one: a wait, not a change
        # A move of a healthy bookie that placement could not make: no lag was waited out,
        # so none starts again (the quorum lags and silences stand as they were).
        unmoved = self._changing_respread and not changed
        if self._changing_respread and changed:
            self._respreads += 1
        self._ensemble = tuple(event.ensemble)
        if self._recovery and changed:  # not in the metadata yet: the close writes them
            kept = [e for e in self._new_ensembles if e.first_entry_id < event.first_entry_id]
            self._new_ensembles = (*kept, Ensemble(event.first_entry_id, self._ensemble))
        self._changing = None
        self._sends.forget_positions(changed)
        self._send_owed(asked, changed)
        self._silent -= changed
        for index in asked if not unmoved else ():  # replaced, or kept: a lag from now on
            self._silent_since.pop(index, None)
        for index in changed:  # a new bookie: silent only from now on
            self._last_ack_s[index] = self._now_s
        still_failed, self._failed_later = self._failed_later - changed, set()
        for pending in self._pending.values():
            if not unmoved:  # the replacements get their own quorum_lag_s from now
                pending.first_ack_s = self._now_s if pending.acked - changed else None
            for index in pending.write_set:
                if index in changed:  # the old bookie's copy is not where readers will look
                    pending.acked.discard(index)
                    pending.sent_s.pop(index, None)
                idle = index not in pending.acked and index not in pending.sent_s
                if idle and index not in still_failed:
                    self._send(pending, index)
        if still_failed:
            self._start_change(still_failed)
        if not self.is_terminal:
            self._complete_ready()

    def _send_owed(self, asked: tuple[int, ...], changed: set[int]) -> None:
        """The copies entries completed during the change owe its positions: to a new
        bookie, or to a kept one that has neither acknowledged nor still holds the send."""
        owed, self._owed = self._owed, {}
        stragglers = self._sends.stragglers
        forgotten: list[int] = []
        for entry_id, done in owed.items():
            in_flight = stragglers.get(entry_id, {})
            targets = [
                index
                for index in done.write_set
                if index in asked
                and (index in changed or (index not in done.acked and index not in in_flight))
            ]
            if len(stragglers) >= STRAGGLERS_MAX and entry_id not in stragglers:
                targets = []  # as many copies in flight as a handle keeps: this one goes
            if not targets:
                forgotten.append(entry_id)
            for n, index in enumerate(targets, start=1):
                sends = stragglers.setdefault(entry_id, {})
                sends[index] = self._now_s
                self._sends.sent(self._now_s, entry_id, index)
                bookie = self._ensemble[index]
                last = n == len(targets)
                self._emit(
                    SendAdd(entry_id, index, bookie, done.lac, done.length, False, True, last)
                )
        if forgotten:
            self._emit(ForgetPayloads(tuple(forgotten)))

    def _on_change_failed(self, event: EnsembleChangeFailed) -> None:
        assert self._changing is not None, "EnsembleChangeFailed without a ChangeEnsemble"
        assert event.kind is not AddErrorKind.TOO_MANY_ENSEMBLE_CHANGES, event
        replaced = ", ".join(self._ensemble[i] for i in self._changing)
        what = f"ensemble change from entry {self._change_first} (replacing {replaced})"
        self._fail(AddError(event.kind, f"{what} failed: {event.reason}"))

    # -------------------------------------------------------------------------- helpers

    def _position(self, pending: _Pending | None, bookie: str) -> int | None:
        """The position in `pending`'s write set that `bookie` holds now, if any."""
        if pending is None:
            return None
        for index in pending.write_set:
            if self._ensemble[index] == bookie:
                return index
        return None

    def _known_failed(self) -> set[int]:
        return set(self._changing or ()) | self._failed_later

    def _send(self, pending: _Pending, index: int) -> None:
        pending.sent_s[index] = self._now_s
        self._sends.sent(self._now_s, pending.entry_id, index)
        bookie = self._ensemble[index]
        self._emit(
            SendAdd(pending.entry_id, index, bookie, pending.lac, pending.length, self._recovery)
        )

    def _positions_failed(self, indices: set[int], lagging_only: bool = False) -> None:
        if self._changing is not None:  # one change at a time; the next one follows it
            self._failed_later |= indices - set(self._changing)
            return
        self._start_change(indices, lagging_only)

    def _start_change(
        self, indices: set[int], lagging_only: bool = False, respread: bool = False
    ) -> None:
        if respread:  # bounded by the changes for failed bookies (respread), never fatal
            pass
        elif lagging_only:  # bounded by LAG_CHANGES_MAX (_holding_up_the_quorum), never fatal
            self._lag_changes += 1
        elif self._changes >= self.config.ensemble_changes_max:
            failed = ", ".join(self._ensemble[i] for i in sorted(indices))
            self._fail(
                AddError(
                    AddErrorKind.TOO_MANY_ENSEMBLE_CHANGES,
                    f"bookie(s) {failed} failed after {self._changes} ensemble changes "
                    f"(the limit is {self.config.ensemble_changes_max})",
                )
            )
            return
        else:
            self._changes += 1
        self._changing = tuple(sorted(indices))
        self._changing_lagging = lagging_only
        self._changing_respread = respread
        self._change_first = self._lac + 1
        bookies = tuple(self._ensemble[i] for i in self._changing)
        silent = tuple(self._ensemble[i] for i in self._changing if i in self._silent)
        persist = not self._recovery
        first = self._change_first
        change = ChangeEnsemble(
            first, self._changing, bookies, persist, lagging_only, silent, respread
        )
        self._emit(change)

    def _complete_ready(self) -> None:
        changing = self._changing
        if changing is not None and self._recovery:
            return  # a re-add needs its whole write quorum: the change's positions too
        # During a change only the positions it keeps count: their copies are where the old
        # ensemble and the new one both say (a replaced bookie's copy is not).
        kept = frozenset(changing or ())
        first = self._lac + 1
        while (head := self._pending.get(self._lac + 1)) and (
            len(head.acked - kept) >= self._acks_needed
        ):
            del self._pending[head.entry_id]
            self._sends.retire(head.entry_id, head.sent_s)
            if changing is not None:
                self._owed[head.entry_id] = head
            self._lac = head.entry_id
            self._length = head.length
        if self._lac >= first:
            self._emit(CompleteAdds(first, self._lac, self._length, changing is not None))
        lagging = self._sends.overflow()
        if lagging:
            self._silent |= lagging
            self._positions_failed(lagging)
        self._maybe_close()

    def _maybe_close(self) -> None:
        if self._phase is _Phase.CLOSING and not self._pending and self._changing is None:
            self._emit(CloseLedger(self._lac, self._length))
            self._enter_terminal(_Phase.CLOSED)

    def _fail(self, error: AddError) -> None:
        entries = tuple(sorted(self._pending))
        self._pending.clear()
        self._sends.clear()
        self._changing = None
        self._failed_later = set()
        self._owed.clear()  # acknowledged already; the driver drops every payload at the end
        self._error = error
        if entries:
            self._emit(FailAdds(entries, error))
        # Always: a close() asked later (or already waiting) must end with this error too.
        self._emit(FailClose(error))
        self._enter_terminal(_Phase.FAILED)

    def _enter_terminal(self, phase: _Phase) -> None:
        self._phase = phase
        self._outbox.seal()

    def _emit(self, action: AddAction) -> None:
        self._outbox.emit(action)

    # ----------------------------------------------------------------------- invariants

    def validate(self) -> None:
        """Assert the invariants; tests call this after every input."""
        assert self._lac <= self.lap, (self._lac, self.lap)
        assert 0 <= self._length <= self._pushed_length, (self._length, self._pushed_length)
        assert len(self._pending) <= self.config.pending_adds_max, len(self._pending)
        assert self._changes <= self.config.ensemble_changes_max, self._changes
        assert 0 <= self._lag_changes <= LAG_CHANGES_MAX, self._lag_changes
        assert 0 <= self._respreads <= self._changes + RESPREAD_CHANGES_FREE, self._respreads
        assert all(0 <= i < len(self._ensemble) for i in self._silent_since), self._silent_since
        self._sends.validate(self._lac)
        if self.is_terminal:
            assert not self._pending and self._changing is None, "work left after the end"
            assert self._outbox.sealed, "terminal but still emitting"
            return
        assert list(self._pending) == list(range(self._lac + 1, self._next_entry_id)), (
            f"pending {list(self._pending)} is not LAC+1..LAP ({self._lac}..{self.lap})"
        )
        previous_length = self._length
        for pending in self._pending.values():
            ws = write_set_indices(pending.entry_id, len(self._ensemble), self._write_quorum)
            assert pending.write_set == ws, (pending.entry_id, pending.write_set)
            assert pending.acked <= set(ws) and set(pending.sent_s) <= set(ws), pending
            assert not pending.acked & set(pending.sent_s), f"acked and in flight: {pending}"
            assert pending.lac < pending.entry_id and pending.length >= previous_length, pending
            previous_length = pending.length
        head = self._pending.get(self._lac + 1)
        if self._changing is None:
            assert not self._failed_later, self._failed_later
            assert not self._owed, f"owed copies after the change: {list(self._owed)}"
            assert head is None or len(head.acked) < self._acks_needed, "held completion"
            assert not (self._phase is _Phase.CLOSING and not self._pending), "close not sent"
        else:
            assert not self._failed_later & set(self._changing), self._failed_later
            assert self._change_first <= self._lac + 1, (self._change_first, self._lac)
            owed = list(self._owed)
            assert owed == list(range(self._change_first, self._change_first + len(owed))), owed
            assert not owed or owed[-1] == self._lac, (owed, self._lac)
            kept = set(self._changing)
            if head is not None and not self._recovery:
                assert len(head.acked - kept) < self._acks_needed, "held completion"
