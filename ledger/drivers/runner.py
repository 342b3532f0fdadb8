"""Drives one pure ledger machine on the event loop: feeds events, runs actions, ticks.

The machine never sees a socket; this runner owns the timer that feeds `Ticked` at the
machine's next wake-up and the request tasks that turn bookie answers back into events.
All of it runs on one event loop thread, so the machine needs no locks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar

from ledger.machines.signals import Ticked

A = TypeVar("A")

log = logging.getLogger(__name__)


class Machine(Protocol):
    """What every ledger machine offers (AddState, RecoveryState, ReadLacState, ...)."""

    def handle(self, event: Any) -> None: ...

    def take_actions(self) -> list[Any]: ...

    def next_wakeup_s(self) -> float | None: ...


class MachineRunner(Generic[A]):
    """Feeds `machine` and carries out its actions with `execute` (which must not block)."""

    def __init__(
        self,
        machine: Machine,
        execute: Callable[[A], None],
        on_crash: Callable[[BaseException], object] | None = None,
    ) -> None:
        """`on_crash` turns a task that died of an unexpected error into an event for the
        machine (I8: a dead task must never leave the machine waiting)."""
        self.machine = machine
        self._execute = execute
        self._on_crash = on_crash
        self._loop = asyncio.get_running_loop()
        # uvloop's call_at gives a plain Handle (no when()) for a time already past: the
        # wake-up time is kept here instead
        self._timer: asyncio.Handle | None = None
        self._timer_at = 0.0
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def now_s(self) -> float:
        return self._loop.time()

    def feed(self, event: object) -> None:
        """Hands one event to the machine, then runs what it asks for."""
        if self._closed:
            return
        self.machine.handle(event)
        self.pump()

    def pump(self) -> None:
        """Runs every queued action in order, then re-arms the wake-up timer."""
        while True:
            actions = self.machine.take_actions()
            if not actions:
                break
            for action in actions:
                self._execute(action)
        self._arm()

    def _arm(self) -> None:
        # A timer that fires before the machine's wake-up stays: the early tick changes
        # nothing and re-arms. Moving it on every answer (the oldest send's deadline moves
        # with each ack) cost a cancel and a call_at per add.
        wakeup = self.machine.next_wakeup_s()
        if self._timer is not None:
            if wakeup is not None and self._timer_at <= wakeup:
                return
            self._timer.cancel()
            self._timer = None
        if wakeup is not None and not self._closed:
            self._timer = self._loop.call_at(wakeup, self._tick)
            self._timer_at = wakeup

    def _tick(self) -> None:
        self._timer = None
        self.feed(Ticked(self._loop.time()))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Runs `work` as a task this runner owns (cancelled by `close`)."""
        task = self._loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            # Request tasks turn every expected error into an event; reaching here is a bug.
            log.error("ledger request task failed", exc_info=error)
            if self._on_crash is not None and not self._closed:
                self._on_crash(error)

    async def close(self) -> None:
        """Stops the timer and cancels every request still running."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
