"""Liveness of the ledger writer's machine and runner (I8): a handle that fails with nothing
pending still ends a close, and a driver task that dies fails the handle."""

from __future__ import annotations

import asyncio

import pytest

from ledger.drivers.runner import MachineRunner
from ledger.machines.add_events import (
    AddAcked,
    AddErrorKind,
    AddFailed,
    ChangeEnsemble,
    CompleteAdds,
    EnsembleChanged,
    EnsembleChangeFailed,
    FailAdds,
    FailClose,
    SendSkipped,
    TaskCrashed,
)
from ledger.machines.add_sends import STRAGGLERS_MAX
from ledger.machines.add_state import (
    LAG_CHANGES_MAX,
    RESPREAD_CHANGES_FREE,
    AddConfig,
    AddState,
)
from ledger.machines.signals import BookieFailure, Ticked

pytestmark = pytest.mark.unit


def acked_machine() -> AddState:
    """A handle whose one entry was acknowledged by two of three bookies."""
    state = AddState(["b0", "b1", "b2"], 3, 2, now_s=0.0)
    assert state.submit(3) == 0
    state.take_actions()
    state.handle(AddAcked(0, "b0"))
    state.handle(AddAcked(0, "b1"))
    assert any(isinstance(a, CompleteAdds) for a in state.take_actions())
    return state


def test_a_late_fenced_answer_with_nothing_pending_fails_the_close() -> None:
    state = acked_machine()
    state.handle(AddFailed(0, "b2", BookieFailure.FENCED))  # the third copy, too late
    actions = state.take_actions()
    assert not any(isinstance(a, FailAdds) for a in actions), "nothing was pending"
    (fail_close,) = [a for a in actions if isinstance(a, FailClose)]
    assert fail_close.error.kind is AddErrorKind.FENCED
    state.begin_close()  # a close asked afterwards has its answer already
    assert state.is_terminal


def test_a_crashed_task_fails_every_pending_add_and_the_close() -> None:
    state = AddState(["b0", "b1", "b2"], 3, 2, now_s=0.0)
    assert state.submit(3) == 0
    state.take_actions()
    state.begin_close()
    state.handle(TaskCrashed("ValueError: invalid literal for int()"))
    actions = state.take_actions()
    (fail_adds,) = [a for a in actions if isinstance(a, FailAdds)]
    (fail_close,) = [a for a in actions if isinstance(a, FailClose)]
    assert fail_adds.entry_ids == (0,)
    assert fail_close.error.kind is AddErrorKind.INTERNAL
    assert "ValueError" in fail_close.error.message
    assert state.submit(1) is None


async def test_the_runner_turns_a_dying_task_into_a_call_of_on_crash() -> None:
    state = AddState(["b0", "b1", "b2"], 3, 2, now_s=0.0)
    crashed: list[BaseException] = []
    runner: MachineRunner[object] = MachineRunner(state, lambda action: None, crashed.append)

    async def dies() -> None:
        raise ValueError("not an integer")

    runner.spawn(dies())
    for _ in range(5):
        await asyncio.sleep(0)
    assert [type(e) for e in crashed] == [ValueError]
    await runner.close()


def test_a_send_that_never_went_out_never_times_out() -> None:
    for skip_first in (True, False):
        state = AddState(["b0", "b1", "b2"], 3, 2, now_s=0.0)
        assert state.submit(3) == 0
        state.take_actions()
        if skip_first:  # the skip reported while the entry is still pending
            state.handle(SendSkipped(0, "b2"))
        state.handle(AddAcked(0, "b0"))
        state.handle(AddAcked(0, "b1"))
        if not skip_first:  # ... or once it completed (the usual case)
            state.handle(SendSkipped(0, "b2"))
        state.handle(Ticked(60.0))  # far past every add timeout
        actions = state.take_actions()
        assert not any(isinstance(a, ChangeEnsemble) for a in actions), actions
        assert not state.is_terminal and state.next_wakeup_s() is None


def test_without_the_skip_the_silent_bookie_is_replaced() -> None:
    """The control: the same answers without SendSkipped time b2 out."""
    state = AddState(["b0", "b1", "b2"], 3, 2, now_s=0.0)
    assert state.submit(3) == 0
    state.take_actions()
    state.handle(AddAcked(0, "b0"))
    state.handle(AddAcked(0, "b1"))
    state.handle(Ticked(60.0))
    assert any(isinstance(a, ChangeEnsemble) for a in state.take_actions())


def held_up_machine(acks: tuple[str, ...]) -> AddState:
    """E/W/A 4/4/3: entry 0 acknowledged by `acks` at t=0.1 (the machine's clock)."""
    state = AddState(["b0", "b1", "b2", "b3"], 4, 3, now_s=0.0)
    assert state.submit(3) == 0
    state.take_actions()
    state.handle(Ticked(0.1))
    for bookie in acks:
        state.handle(AddAcked(0, bookie))
    state.take_actions()
    return state


def test_bookies_holding_up_an_ack_quorum_are_replaced_after_the_quorum_lag() -> None:
    """Two of four copies acknowledged (a cut took the other two): the two silent bookies
    are replaced `quorum_lag_s` after the first ack, long before the add timeout."""
    state = held_up_machine(("b0", "b1"))
    lag_s = state.config.quorum_lag_s
    assert lag_s is not None and lag_s < state.config.add_timeout_s
    assert state.next_wakeup_s() == pytest.approx(0.1 + lag_s)
    state.handle(Ticked(0.1 + lag_s * 0.9))
    assert not any(isinstance(a, ChangeEnsemble) for a in state.take_actions())
    state.handle(Ticked(0.1 + lag_s))
    changes = [a for a in state.take_actions() if isinstance(a, ChangeEnsemble)]
    assert [c.bookies for c in changes] == [("b2", "b3")], changes
    assert state.next_wakeup_s() is not None and state.next_wakeup_s() > 0.1 + lag_s


def test_no_ack_at_all_or_a_met_quorum_replaces_nobody_before_the_add_timeout() -> None:
    """Every bookie slow (a shared disk) is not a cut: nothing to compare with, nothing
    replaced early; a quorum met leaves the last copy to the add timeout."""
    for acks in ((), ("b0", "b1", "b2")):
        state = held_up_machine(acks)
        state.handle(Ticked(4.0))
        assert not any(isinstance(a, ChangeEnsemble) for a in state.take_actions()), acks
        state.handle(Ticked(5.1))  # the add timeout
        changes = [a for a in state.take_actions() if isinstance(a, ChangeEnsemble)]
        assert len(changes) == 1, (acks, changes)


def test_a_change_that_keeps_the_bookies_is_not_counted_against_the_limit() -> None:
    """Placement with no better bookie gives the same ensemble back: the machine waits
    and asks again, as often as it lags, without using up `ensemble_changes_max`."""
    state = held_up_machine(("b0", "b1"))
    lag_s = state.config.quorum_lag_s
    assert lag_s is not None
    now_s = 0.1
    for _ in range(state.config.ensemble_changes_max + 5):
        now_s += lag_s
        state.handle(Ticked(now_s))
        changes = [a for a in state.take_actions() if isinstance(a, ChangeEnsemble)]
        assert len(changes) == 1 and not state.is_terminal, (now_s, changes)
        state.handle(EnsembleChanged(changes[0].first_entry_id, ("b0", "b1", "b2", "b3")))
        state.take_actions()
        state.validate()


def test_the_lag_counts_from_the_first_ack_as_the_driver_stamps_it() -> None:
    """The machine's clock moves only with Ticked: the driver stamps it before an entry's
    first ack (`wants_ack_time`), so a first ack that came late (every bookie slow) starts
    the lag then, not at the entry's send."""
    state = AddState(["b0", "b1", "b2", "b3"], 4, 3, now_s=0.0)
    assert state.submit(3) == 0
    state.take_actions()
    assert state.wants_ack_time(0)
    state.handle(Ticked(2.0))  # as the driver does
    state.handle(AddAcked(0, "b0"))
    assert not state.wants_ack_time(0)
    lag_s = state.config.quorum_lag_s
    assert lag_s is not None
    assert state.next_wakeup_s() == pytest.approx(2.0 + lag_s)
    state.handle(AddAcked(0, "b1"))
    state.handle(AddAcked(0, "b2"))
    state.handle(Ticked(2.0 + lag_s))
    actions = state.take_actions()
    assert any(isinstance(a, CompleteAdds) for a in actions)
    assert not any(isinstance(a, ChangeEnsemble) for a in actions), actions


def test_a_failed_bookie_kept_by_placement_still_counts_against_the_limit() -> None:
    """A dead bookie with no spare ends the handle after `ensemble_changes_max` attempts (as
    before); only slow ones are waited for without end."""
    state = AddState(["b0", "b1", "b2"], 3, 2, now_s=0.0, config=AddConfig(ensemble_changes_max=3))
    assert state.submit(3) == 0
    state.take_actions()
    for _ in range(3):
        state.handle(AddFailed(0, "b2", BookieFailure.BOOKIE_DOWN))
        changes = [a for a in state.take_actions() if isinstance(a, ChangeEnsemble)]
        assert len(changes) == 1 and not changes[0].lagging
        state.handle(EnsembleChanged(0, ("b0", "b1", "b2")))
        state.take_actions()
    state.handle(AddFailed(0, "b2", BookieFailure.BOOKIE_DOWN))
    assert state.is_terminal


def test_a_busy_bookie_that_keeps_acknowledging_earlier_entries_is_waited_for() -> None:
    """A saturated bookie answers late but answers: its acks of earlier entries keep it from
    counting as silent, while a cut one beside it (b3, silent) is replaced."""
    state = AddState(["b0", "b1", "b2", "b3"], 4, 3, now_s=0.0)
    for entry in range(4):
        assert state.submit(3) == entry
    state.take_actions()
    for entry in range(4):  # b0 and b1 answer at once; b2 is busy, b3 is cut
        state.handle(Ticked(0.01 * (entry + 1)))
        state.handle(AddAcked(entry, "b0"))
        state.handle(AddAcked(entry, "b1"))
    replaced: list[tuple[str, ...]] = []
    now_s = 0.05
    for entry in range(4):  # b2 works through its queue, an entry every 0.4 s
        now_s += 0.4
        state.handle(Ticked(now_s))
        for action in state.take_actions():
            if isinstance(action, ChangeEnsemble):
                replaced.append(action.bookies)
                state.handle(EnsembleChanged(action.first_entry_id, ("b0", "b1", "b2", "b4")))
                for resent in range(action.first_entry_id, 4):  # b4 answers at once
                    state.handle(AddAcked(resent, "b4"))
        state.handle(AddAcked(entry, "b2"))
        state.validate()
    assert replaced == [("b3",)], replaced
    state.handle(Ticked(now_s + 0.01))
    assert state.lac == 3 and not state.is_terminal


def test_changes_for_silent_bookies_are_bounded_and_never_fail_the_handle() -> None:
    """Past LAG_CHANGES_MAX changes for silent bookies, a handle waits for the add timeout
    instead (each change is a metadata write): it is not failed for them."""
    state = held_up_machine(("b0", "b1"))
    lag_s = state.config.quorum_lag_s
    assert lag_s is not None
    now_s, spare = 0.1, 10
    for _ in range(LAG_CHANGES_MAX):
        now_s += lag_s
        state.handle(Ticked(now_s))
        [change] = [a for a in state.take_actions() if isinstance(a, ChangeEnsemble)]
        ensemble = list(state.ensemble)
        for index in change.indices:  # new bookies, as silent as the old ones
            ensemble[index], spare = f"b{spare}", spare + 1
        state.handle(EnsembleChanged(change.first_entry_id, tuple(ensemble)))
        state.take_actions()
        state.validate()
    state.handle(Ticked(now_s + 2 * lag_s))
    assert not any(isinstance(a, ChangeEnsemble) for a in state.take_actions())
    assert not state.is_terminal
    state.handle(Ticked(now_s + state.config.add_timeout_s))  # the add timeout still replaces
    assert any(isinstance(a, ChangeEnsemble) for a in state.take_actions())


def test_a_recovery_re_add_held_up_by_a_silent_bookie_replaces_it_after_the_quorum_lag() -> None:
    """Recovery re-adds wait for the whole write quorum: three of four copies made and the
    fourth bookie behind a cut, the re-add replaces it after the lag, not the add timeout
    (a new owner's takeover waited 5 s per cut bookie for this)."""
    state = AddState(["b0", "b1", "b2", "b3"], 4, 3, recovery=True, now_s=0.0)
    assert state.submit(3) == 0
    state.take_actions()
    assert state.wants_ack_time(0)
    state.handle(Ticked(0.1))
    for bookie in ("b0", "b1", "b2"):
        state.handle(AddAcked(0, bookie))
    assert not any(isinstance(a, CompleteAdds) for a in state.take_actions())
    lag_s = state.config.quorum_lag_s
    assert lag_s is not None and state.next_wakeup_s() == pytest.approx(0.1 + lag_s)
    state.handle(Ticked(0.1 + lag_s))
    changes = [a for a in state.take_actions() if isinstance(a, ChangeEnsemble)]
    assert [(c.bookies, c.silent, c.lagging, c.persist) for c in changes] == [
        (("b3",), ("b3",), True, False)
    ], changes
    state.handle(EnsembleChanged(0, ("b0", "b1", "b2", "b4")))
    resent = state.take_actions()
    state.handle(AddAcked(0, "b4"))
    assert any(getattr(a, "bookie", None) == "b4" for a in resent), resent
    assert any(isinstance(a, CompleteAdds) for a in state.take_actions())


def test_a_change_names_the_bookies_that_fell_silent_not_those_that_answered_a_failure() -> None:
    """A timed-out bookie is `silent` (likely cut off, with its region mates), and so is one
    whose connection failed or stalled; one that answered an error is not (it is down on its
    own)."""
    state = AddState(["b0", "b1", "b2"], 3, 2, now_s=0.0)
    assert state.submit(3) == 0
    state.take_actions()
    state.handle(AddFailed(0, "b0", BookieFailure.OTHER))
    answered = [a for a in state.take_actions() if isinstance(a, ChangeEnsemble)]
    assert [(c.bookies, c.silent) for c in answered] == [(("b0",), ())], answered
    lost = AddState(["b0", "b1", "b2"], 3, 2, now_s=0.0)
    assert lost.submit(3) == 0
    lost.take_actions()
    lost.handle(AddFailed(0, "b0", BookieFailure.BOOKIE_DOWN))
    dropped = [a for a in lost.take_actions() if isinstance(a, ChangeEnsemble)]
    assert [(c.bookies, c.silent) for c in dropped] == [(("b0",), ("b0",))], dropped
    state.handle(EnsembleChanged(0, ("b3", "b1", "b2")))
    state.take_actions()
    state.handle(AddAcked(0, "b1"))
    state.handle(Ticked(state.config.add_timeout_s + 1.0))  # b2 and b3 never answer
    timed_out = [a for a in state.take_actions() if isinstance(a, ChangeEnsemble)]
    assert [set(c.silent) for c in timed_out] == [{"b2", "b3"}], timed_out
    assert set(timed_out[0].bookies) == {"b2", "b3"}


def test_bookies_seen_failing_elsewhere_are_replaced_at_the_first_ack_not_a_lag_later() -> None:
    """A new owner made its segment's ledger while it recovered the last one, and the
    recovery found two bookies cut off (at 1.0): the new ledger's first entry replaces them
    as soon as it has a first ack, instead of waiting a whole lag from it."""
    state = AddState(["b0", "b1", "b2", "b3"], 4, 3, now_s=0.0)
    state.failed_since("b2", 1.0)
    state.failed_since("b3", 1.2)
    state.failed_since("b3", 1.1)  # the earliest failure counts
    lag_s = state.config.quorum_lag_s
    assert lag_s is not None
    state.handle(Ticked(1.0 + lag_s + 0.3))
    assert state.submit(3) == 0
    state.take_actions()
    state.handle(AddAcked(0, "b0"))
    assert state.next_wakeup_s() == pytest.approx(1.0 + lag_s)  # already due
    state.handle(AddAcked(0, "b1"))
    state.handle(Ticked(1.0 + lag_s + 0.35))
    changes = [a for a in state.take_actions() if isinstance(a, ChangeEnsemble)]
    assert [(c.bookies, c.lagging) for c in changes] == [(("b2", "b3"), True)], changes


def test_a_bookie_that_answered_this_handle_is_not_suspected_for_a_failure_elsewhere() -> None:
    """Failures seen elsewhere only count for bookies silent here: one that acknowledged an
    entry of this handle gets the lag from entries' first acks, as usual."""
    state = AddState(["b0", "b1", "b2", "b3"], 4, 3, now_s=0.0)
    assert state.submit(3) == 0
    state.take_actions()
    for bookie in ("b0", "b1", "b2", "b3"):
        state.handle(AddAcked(0, bookie))
    state.take_actions()
    state.failed_since("b3", 0.5)
    state.handle(Ticked(2.0))
    assert state.submit(3) == 1
    state.take_actions()
    state.handle(AddAcked(1, "b0"))
    lag_s = state.config.quorum_lag_s
    assert lag_s is not None
    assert state.next_wakeup_s() == pytest.approx(2.0 + lag_s)


def test_stragglers_stay_bounded_when_completions_come_in_a_batch() -> None:
    """A bookie that never answers leaves a straggler per completed entry until too many
    start a change; entries then completing together during it (acked by the kept bookies)
    must not take the stragglers past their bound."""
    machine = AddState(
        ["b0", "b1", "b2"], 3, 2, config=AddConfig(quorum_lag_s=None, add_timeout_s=1e9)
    )

    def ack(entry_id: int, bookie: str) -> None:
        machine.handle(AddAcked(entry_id, bookie))
        machine.validate()

    for entry_id in range(STRAGGLERS_MAX):  # b2 never answers
        assert machine.submit(1) == entry_id
        ack(entry_id, "b0")
        ack(entry_id, "b1")
    first = STRAGGLERS_MAX
    for _ in range(3):
        machine.submit(1)
    machine.take_actions()
    ack(first, "b0")
    ack(first, "b1")  # one straggler too many: b2 is replaced
    changes = [a for a in machine.take_actions() if isinstance(a, ChangeEnsemble)]
    assert [c.bookies for c in changes] == [("b2",)], changes
    ack(first + 2, "b0")
    ack(first + 2, "b1")
    ack(first + 1, "b0")
    ack(first + 1, "b1")  # two entries complete at once during the change
    assert machine.lac == first + 2
    completed = [a for a in machine.take_actions() if isinstance(a, CompleteAdds)]
    assert completed and all(c.keep_payloads for c in completed), completed


def test_a_failed_change_frees_the_room_its_completions_held() -> None:
    """Entries completed during a change hold their payloads (and the room) until it lands;
    a change that fails ends the handle, and the room must show it (waiters wake)."""
    machine = AddState(["b0", "b1", "b2"], 3, 2, config=AddConfig(pending_adds_max=1))
    assert machine.submit(5) == 0
    machine.handle(AddFailed(0, "b2", BookieFailure.BOOKIE_DOWN))
    machine.handle(AddAcked(0, "b0"))
    machine.handle(AddAcked(0, "b1"))
    machine.validate()
    assert machine.lac == 0 and machine.pending_count == 0 and machine.room == 0
    machine.take_actions()
    machine.handle(EnsembleChangeFailed(AddErrorKind.FENCED, "the ledger is in recovery"))
    machine.validate()
    actions = machine.take_actions()
    assert [type(a) for a in actions] == [FailClose], actions
    assert machine.error is not None and machine.room == 1


def test_moves_of_healthy_bookies_are_bounded_and_wait_for_silent_ones() -> None:
    """`respread` moves a healthy bookie: never while one of the ensemble is silent (its
    own change comes first); at most one per change for a failed bookie plus
    RESPREAD_CHANGES_FREE that change something; one placement could not make costs none."""
    machine = AddState(["b0", "b1", "b2", "b3"], 4, 3)
    machine.failed_since("b1", 0.0)  # another handle saw b1 fail
    assert not machine.respread(3)
    machine.heard_from("b1")
    spare = iter(f"n{i}" for i in range(100))
    for _ in range(RESPREAD_CHANGES_FREE):
        assert machine.respread(3)
        assert not machine.respread(2), "one change at a time"
        (change,) = [a for a in machine.take_actions() if isinstance(a, ChangeEnsemble)]
        assert change.respread and change.bookies == (machine.ensemble[3],)
        unmoved = machine.ensemble  # placement found nowhere: costs nothing
        machine.handle(EnsembleChanged(change.first_entry_id, unmoved))
        assert machine.respread(3)
        machine.take_actions()
        moved = (*machine.ensemble[:3], next(spare))
        machine.handle(EnsembleChanged(change.first_entry_id, moved))
        machine.validate()
    assert not machine.respread(3), "the budget of moves is spent"
    assert machine.submit(1) == 0  # and the handle writes on
    machine.take_actions()
    failed = machine.ensemble[2]
    machine.handle(AddFailed(0, failed, BookieFailure.BOOKIE_DOWN))
    (change,) = [a for a in machine.take_actions() if isinstance(a, ChangeEnsemble)]
    assert change.bookies == (failed,) and not change.respread
    ensemble = machine.ensemble
    machine.handle(EnsembleChanged(change.first_entry_id, (*ensemble[:2], "n99", ensemble[3])))
    machine.validate()
    assert machine.respread(3), "a failed bookie's change earns one move back"
