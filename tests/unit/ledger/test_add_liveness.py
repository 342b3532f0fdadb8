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
    FailAdds,
    FailClose,
    SendSkipped,
    TaskCrashed,
)
from ledger.machines.add_state import AddState
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
