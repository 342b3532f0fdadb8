"""The faults a failover run has in force, and their healing: the nemesis registers each
fault's undo before it applies the fault, so whatever stops the run (a worker's failure, Ctrl-C,
an error while the fault is being applied) the run's end heals it, bounded, and says how."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from core.errors import GlobelogError
from verify.run.recorder import Recorder, WorkerFailedError, wall_now

# A heal waits for what it brings back: a region's processes restarted and serving again take
# the cluster's own longest waits (ZooKeeper 60 s, bookies 120 s, proxies 60 s in
# localcluster/controller.py); past that, the heal is reported as failed.
HEAL_BOUND_S = 300.0

Undo = Callable[[], Awaitable[object]]


class HealFailedError(GlobelogError):
    """A fault's undo raised, or did not end within HEAL_BOUND_S: the cluster may still have
    the fault. The undo's error is the `__cause__`."""

    code = "failover_heal_failed"


@dataclass(frozen=True, slots=True)
class _Fault:
    kind: str
    what: str  # as the history names it
    undo: Undo


class FaultsInForce:
    """The fault the nemesis is applying or holding (one at a time), and what the run undoes at
    its end whatever happened (`always`: every WAN partition and slowed route). After each
    heal, `revive` starts processes that exited on their own again, as a deployment's
    supervisor does (a bookie stopped by its own re-registration, say)."""

    def __init__(
        self,
        rec: Recorder,
        always: list[tuple[str, Undo]],
        revive: Callable[[Callable[[str], None]], Awaitable[None]] | None = None,
    ) -> None:
        self._rec = rec
        self._always = always
        self._revive = revive
        self._in_force: _Fault | None = None

    @property
    def in_force(self) -> str | None:
        return None if self._in_force is None else self._in_force.what

    def applying(self, kind: str, what: str, undo: Undo) -> None:
        """Registers the undo of a fault about to be applied: a fault half applied when the run
        stops is healed too."""
        assert self._in_force is None, f"{what} while {self._in_force} is in force"
        self._in_force = _Fault(kind, what, undo)

    async def heal(self) -> None:
        """Undoes the fault in force (none: nothing), bounded, and writes the heal to the
        history. HealFailedError when the undo raised or ran out of time; the fault stays
        registered then, and when the heal is cancelled, for the run's end to undo."""
        fault = self._in_force
        if fault is None:
            return
        try:
            await _undo(f"heal of {fault.what}", fault.undo)
        except HealFailedError as failed:
            self._rec.add(process="nemesis", type="fail", f="heal", fault=fault.kind,
                          value=fault.what, detail=str(failed), wall=wall_now())  # fmt: skip
            raise
        self._in_force = None
        self._rec.add(process="nemesis", type="info", f="heal", fault=fault.kind,
                      value=fault.what, wall=wall_now())  # fmt: skip
        await self.revive()

    async def revive(self) -> None:
        """With no fault in force: processes that exited on their own started again, as the
        deployment's supervisor would, each written to the history (bounded as a heal is)."""
        if self._revive is None or self._in_force is not None:
            return
        revive = self._revive

        def said(what: str) -> None:  # each one as it is started: a later failure keeps it
            name = what.split(" ", maxsplit=1)[0]
            self._rec.add(process="nemesis", type="info", f="revive", value=name, detail=what,
                          wall=wall_now())  # fmt: skip

        async def run() -> None:
            await revive(said)

        try:
            await _undo("revive exited processes", run)
        except HealFailedError as failed:
            self._rec.add(process="nemesis", type="fail", f="revive", detail=str(failed),
                          wall=wall_now())  # fmt: skip
            raise

    async def heal_all(self) -> list[HealFailedError]:
        """At the run's end: the fault in force, then each of `always`, each bounded; the
        failures, in that order."""
        failures: list[HealFailedError] = []
        try:
            await self.heal()
            await self.revive()  # also with nothing in force: one may have exited since
        except HealFailedError as failed:
            failures.append(failed)
        for what, undo in self._always:
            try:
                await _undo(what, undo)
            except HealFailedError as failed:
                failures.append(failed)
        return failures


async def _undo(what: str, undo: Undo) -> None:
    """Awaits `undo`, at most HEAL_BOUND_S; HealFailedError (the undo's error as its cause)
    when it raised or ran out of time."""
    bound = asyncio.timeout(HEAL_BOUND_S)
    try:
        async with bound:
            await undo()
    except Exception as err:
        why = (
            f"no end within {HEAL_BOUND_S:g} s"
            if bound.expired()
            else f"{type(err).__name__}: {err}"
        )
        raise HealFailedError(f"{what}: {why}") from err


async def heal_at_end(
    faults: FaultsInForce, ended: BaseException | None, progress: Callable[[str], None]
) -> None:
    """Heals what is in force once the workload ended (`ended`: how, None when it finished),
    and settles the outcome when a heal failed: a cancel or interrupt wins (the caller
    re-raises it) and each failure is printed with its cause; a failed worker's
    WorkerFailedError gains the failures as causes; a workload that finished fails the run
    with them. Anything else the workload raised is re-raised by the caller, the failures
    printed."""
    failures = await faults.heal_all()
    if not failures:
        return
    causes: list[tuple[str, BaseException]] = [("heal", failed) for failed in failures]
    if ended is None:
        raise WorkerFailedError(causes) from failures[0]
    if isinstance(ended, WorkerFailedError):
        raise WorkerFailedError([*ended.causes, *causes]) from ended.__cause__
    for failed in failures:
        progress(f"could not heal: {failed}; the cluster may still have it")
