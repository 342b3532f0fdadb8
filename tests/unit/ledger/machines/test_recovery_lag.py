"""A recovery's re-adds against a bookie behind a cut: it is replaced once silent for the
quorum lag, counted from when its fence was asked (it answered nothing since), or from when
this client saw it fail before the recovery, not from the re-add's first acknowledgement, and
not after the 5 s add timeout."""

from __future__ import annotations

import pytest

from ledger.codecs.metadata import DigestType, Ensemble, LedgerMetadata
from ledger.machines.add_events import AddAcked, ChangeEnsemble, CloseLedger, EnsembleChanged
from ledger.machines.read_lac_state import LacReadFailed, LacReplied
from ledger.machines.read_state import EntryRead, EntryReadFailed
from ledger.machines.recovery_state import RecoveryState
from ledger.machines.signals import BookieFailure, Ticked

pytestmark = pytest.mark.unit

ENSEMBLE = ("b0", "b1", "b2", "b3")
LAG_S = 0.5  # AddConfig's default quorum_lag_s


def open_ledger() -> LedgerMetadata:
    return LedgerMetadata(4, 4, 3, (Ensemble(0, ENSEMBLE),), DigestType.CRC32C, b"pw")


def fenced_and_read(state: RecoveryState, answering: tuple[str, ...], at_s: float) -> None:
    """The fence answered by `answering` (LAC 4, 50 bytes), entry 5 found on them and entry
    6 denied by them, all at `at_s`."""
    state.handle(Ticked(at_s))
    for bookie in answering:
        state.handle(LacReplied(bookie, 4, 50))
    for bookie in answering:
        state.handle(EntryRead(5, bookie, 10, 60))
        state.handle(EntryReadFailed(6, bookie, BookieFailure.NO_SUCH_ENTRY))
    state.take_actions()


def test_a_bookie_silent_since_the_fence_is_replaced_a_lag_after_the_fence() -> None:
    state = RecoveryState(open_ledger(), now_s=10.0)
    state.take_actions()  # the fences, sent at 10.0
    fenced_and_read(state, ("b0", "b1", "b2"), at_s=10.1)
    state.handle(Ticked(10.2))
    for bookie in ("b0", "b1", "b2"):
        state.handle(AddAcked(5, bookie))
    assert state.next_wakeup_s() == pytest.approx(10.0 + LAG_S)
    state.handle(Ticked(10.0 + LAG_S))
    changes = [a for a in state.take_actions() if isinstance(a, ChangeEnsemble)]
    assert [(c.bookies, c.silent, c.lagging) for c in changes] == [(("b3",), ("b3",), True)]
    state.handle(EnsembleChanged(5, ("b0", "b1", "b2", "b4")))
    state.take_actions()
    state.handle(AddAcked(5, "b4"))
    closes = [a for a in state.take_actions() if isinstance(a, CloseLedger)]
    assert [(c.last_entry_id, c.length) for c in closes] == [(5, 60)], closes
    assert closes[0].ensembles == (Ensemble(5, ("b0", "b1", "b2", "b4")),)


def test_a_bookie_that_answered_its_fence_late_gets_the_lag_from_the_first_ack() -> None:
    """Slow, not silent: it answered the fence after the read completed, so its re-add is
    given the full lag from the re-add's first acknowledgement."""
    state = RecoveryState(open_ledger(), now_s=10.0)
    state.take_actions()
    fenced_and_read(state, ("b0", "b1", "b2"), at_s=10.1)
    state.handle(Ticked(10.15))
    state.handle(LacReplied("b3", 4, 50))
    state.handle(Ticked(10.2))
    for bookie in ("b0", "b1", "b2"):
        state.handle(AddAcked(5, bookie))
    assert state.next_wakeup_s() == pytest.approx(10.2 + LAG_S)
    state.handle(Ticked(10.0 + LAG_S))
    assert not any(isinstance(a, ChangeEnsemble) for a in state.take_actions())
    state.handle(Ticked(10.2 + LAG_S))
    changes = [a for a in state.take_actions() if isinstance(a, ChangeEnsemble)]
    assert [c.bookies for c in changes] == [("b3",)]


def test_a_silent_bookie_kept_for_want_of_a_better_one_gets_a_fresh_lag() -> None:
    """Placement answers the lag change with the same bookies (none better usable): the
    next look is a whole lag later, not at once (its silence dated from the fence would
    make every later deadline past: a change asked again and again at the same instant)."""
    state = RecoveryState(open_ledger(), now_s=10.0)
    state.take_actions()
    fenced_and_read(state, ("b0", "b1", "b2"), at_s=10.1)
    state.handle(Ticked(10.2))
    for bookie in ("b0", "b1", "b2"):
        state.handle(AddAcked(5, bookie))
    state.handle(Ticked(10.0 + LAG_S))
    assert any(isinstance(a, ChangeEnsemble) for a in state.take_actions())
    state.handle(EnsembleChanged(5, ENSEMBLE))
    state.take_actions()
    assert state.next_wakeup_s() == pytest.approx(10.0 + 2 * LAG_S)
    state.handle(Ticked(10.7))
    state.handle(AddAcked(5, "b3"))  # it answers after all
    closes = [a for a in state.take_actions() if isinstance(a, CloseLedger)]
    assert [c.ensembles for c in closes] == [()], "a change that changed nothing was written"


def test_a_fence_that_failed_on_our_side_is_no_answer_from_the_bookie() -> None:
    """A connection that stalled or was lost (BOOKIE_DOWN) or a fence that timed out is the
    client's failure, not the bookie speaking: it stays silent since the fence."""
    state = RecoveryState(open_ledger(), now_s=10.0)
    state.take_actions()
    state.handle(Ticked(10.05))
    state.handle(LacReadFailed("b3", BookieFailure.BOOKIE_DOWN))
    fenced_and_read(state, ("b0", "b1", "b2"), at_s=10.1)
    state.handle(Ticked(10.2))
    for bookie in ("b0", "b1", "b2"):
        state.handle(AddAcked(5, bookie))
    assert state.next_wakeup_s() == pytest.approx(10.0 + LAG_S)


def test_a_bookie_this_client_saw_fail_before_the_recovery_is_replaced_at_once() -> None:
    """Seen failing 2 s before the fence (a region cut off before its stream's recovery) and
    silent since: its lag has run out when the re-add is first acknowledged. One seen failing
    too but that answered its fence is slow, not silent: the lag from the first ack."""
    state = RecoveryState(open_ledger(), now_s=10.0, failed_since={"b3": 8.0, "b2": 8.0})
    state.take_actions()
    fenced_and_read(state, ("b0", "b1", "b2"), at_s=10.1)
    state.handle(Ticked(10.2))
    for bookie in ("b0", "b1"):  # b2 and b3 not yet
        state.handle(AddAcked(5, bookie))
    assert state.next_wakeup_s() == pytest.approx(8.0 + LAG_S)  # past: the next tick
    state.handle(Ticked(10.2))
    changes = [a for a in state.take_actions() if isinstance(a, ChangeEnsemble)]
    assert [(c.bookies, c.silent) for c in changes] == [(("b3",), ("b3",))]
