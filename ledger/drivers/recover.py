"""Open with recovery: fence the ledger, agree on its last entry, re-replicate, close it.

Drives `RecoveryState`; the metadata goes OPEN -> IN_RECOVERY first (which also stops the
old writer's ensemble changes) and IN_RECOVERY -> CLOSED at the end. A failed recovery
leaves the ledger IN_RECOVERY, and anyone may run it again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from core import runtime
from core.errors import GlobelogError
from ledger.codecs.entry import EntryCodec, master_key
from ledger.codecs.metadata import LedgerMetadata, LedgerState
from ledger.connections.bookie_client import SILENCE_EVIDENCE_S
from ledger.drivers.context import (
    UNCHANGED_FIRST_S,
    UNCHANGED_MAX_S,
    LedgerContext,
    say_nowhere,
    update_metadata,
    with_ensemble,
)
from ledger.drivers.metadata_store import VersionedMetadata
from ledger.drivers.requests import LedgerRequests, ReadOutcome
from ledger.drivers.runner import MachineRunner
from ledger.errors import LedgerRecoveryError, LedgerRecoveryTimeoutError
from ledger.machines.add_events import (
    AddAcked,
    AddErrorKind,
    AddFailed,
    ChangeEnsemble,
    CloseLedger,
    CompleteAdds,
    EnsembleChanged,
    EnsembleChangeFailed,
    SendAdd,
)
from ledger.machines.read_lac_state import LacReadFailed, SendReadLac
from ledger.machines.read_state import CompleteRead, EntryReadFailed, SendRead
from ledger.machines.recovery_events import FailRecovery, RecoveryAction
from ledger.machines.recovery_state import RecoveryConfig, RecoveryState
from ledger.machines.signals import RecordHealth, Ticked
from placement import NotEnoughBookiesError, PlacementError

E = TypeVar("E")
log = logging.getLogger(__name__)
FAILED = (AddFailed, EntryReadFailed, LacReadFailed)  # the answers that count a bookie failed


class _AlreadyClosedError(Exception):
    """The metadata turned out CLOSED: someone else finished the ledger."""


class _EnsembleMovedError(Exception):
    """The old writer changed the ensemble before IN_RECOVERY landed: recover that one."""

    def __init__(self, versioned: VersionedMetadata) -> None:
        super().__init__(f"ledger {versioned.ledger_id}: the ensemble changed during recovery")
        self.versioned = versioned


# Times a recovery starts again because the old writer moved the ensemble meanwhile: each
# move needs a failed add of that writer, which fencing and IN_RECOVERY soon stop.
ENSEMBLE_MOVES_MAX = 5
# The last entries a recovery read, kept for its reader: a new stream owner reads the last
# one or two (the segment's summary) right after, and each read would cross the WAN again.
TAIL_KEPT = 4
# A recovery slower than this logs when each of its steps came (info; faster ones at debug):
# a new owner's takeover waits for it.
SLOW_RECOVERY_S = 1.0


@dataclass(frozen=True, slots=True)
class Recovered:
    """A recovery's outcome: the metadata as it left it (CLOSED; or, with the close left to
    the caller, IN_RECOVERY and `closing` to write over it), and the last few entries it read
    (TAIL_KEPT at most, by entry id; those past the end included), which a reader need not
    read again."""

    metadata: VersionedMetadata
    tail: dict[int, bytes]
    closing: LedgerMetadata | None = None


async def recover(
    context: LedgerContext, versioned: VersionedMetadata, *, write_close: bool = True
) -> Recovered:
    """Recovers the ledger unless it is closed. Without `write_close`, the CLOSED metadata is
    not written but returned (`Recovered.closing`), for the caller to write in a multi-op of
    its own; until it does, the ledger stays IN_RECOVERY, which a later recovery finishes.

    The metadata goes IN_RECOVERY while the bookies are fenced and read, not before them:
    across regions a ZooKeeper write takes as long as the fence and the reads together, and
    only the close depends on it. IN_RECOVERY stops the old writer's ensemble changes (its
    compare-and-set fails); one that landed first shows in the metadata IN_RECOVERY is
    written over, and the recovery starts again on the new ensemble, whose bookies it then
    fences."""

    def start(metadata: LedgerMetadata) -> LedgerMetadata:
        if metadata.state is LedgerState.CLOSED:
            raise _AlreadyClosedError
        return dataclasses.replace(metadata, state=LedgerState.IN_RECOVERY)

    for _ in range(ENSEMBLE_MOVES_MAX):
        if versioned.metadata.state is LedgerState.CLOSED:
            return Recovered(versioned, {})
        mark = functools.partial(update_metadata, context.metadata, versioned, start)
        recovery = _Recovery(context, versioned, mark, write_close)
        try:
            ended = await recovery.run()
        except _AlreadyClosedError:
            context.metrics.recoveries.add(1, {"outcome": "already_closed"})
            return Recovered(await context.metadata.read(versioned.ledger_id), {})
        except _EnsembleMovedError as moved:
            versioned = moved.versioned
            continue
        except GlobelogError as err:
            # A recovery that failed on the ensemble it read (its dead bookie, say) may have
            # failed because the old writer had moved on from it: then it starts again.
            moved_to = await recovery.moved_ensemble()
            if moved_to is not None:
                versioned = moved_to
                continue
            context.metrics.recoveries.add(1, {"outcome": err.code})
            raise
        finally:
            recovery.let_marking_go()
        context.metrics.recoveries.add(1, {"outcome": "closed"})
        recovery.log_steps()
        return Recovered(ended, recovery.tail, recovery.closing)
    raise LedgerRecoveryError(
        f"ledger {versioned.ledger_id}: its ensemble changed {ENSEMBLE_MOVES_MAX} times while "
        "it was recovered"
    )


class _Recovery:
    def __init__(
        self,
        context: LedgerContext,
        versioned: VersionedMetadata,
        mark: Callable[[], Awaitable[VersionedMetadata]],
        write_close: bool = True,
    ) -> None:
        metadata = versioned.metadata
        self.ledger_id = versioned.ledger_id
        self._context = context
        self._versioned = versioned
        self._mark = mark  # writes IN_RECOVERY: started with the run, beside the fencing
        self._marking: asyncio.Future[VersionedMetadata] | None = None
        self._write_close = write_close
        self.closing: LedgerMetadata | None = None  # the close left to the caller
        codec = EntryCodec(self.ledger_id, metadata.digest_type, metadata.password)
        key = master_key(metadata.password)
        self._requests = LedgerRequests(context.bookies, self.ledger_id, codec, key)
        self._ensemble = metadata.current_ensemble
        config = RecoveryConfig(read_timeout_s=context.config.read_timeout_s)
        now_s = context.clock()
        failed_since = {}  # seen failing, or sent requests it has not answered, and silent since
        for bookie in set(self._ensemble):
            known = (
                context.placement.silent_since_failure_s(bookie, now_s),
                context.bookies.silent_since_s(bookie, SILENCE_EVIDENCE_S),
            )
            if any(t is not None for t in known):
                failed_since[bookie] = min(t for t in known if t is not None)
        self._state = RecoveryState(metadata, now_s=now_s, config=config, failed_since=failed_since)
        self._runner: MachineRunner[RecoveryAction] = MachineRunner(
            self._state, self._execute, lambda err: self._fail(f"a recovery task crashed: {err!r}")
        )
        self._failed: set[str] = set()  # bookies that failed a request of this recovery
        self._unchanged_backoff_s = UNCHANGED_FIRST_S  # before asking lost bookies again
        self._waiting: dict[str, int] = {}  # bookie -> requests sent and not answered yet
        self._bodies: dict[tuple[int, str], bytes] = {}  # (entry, bookie) -> payload, unchosen
        self._recovered: dict[int, bytes] = {}  # entries to re-add
        self.tail: dict[int, bytes] = {}  # the last TAIL_KEPT entries read, by entry id
        self._done: asyncio.Future[VersionedMetadata] = asyncio.get_running_loop().create_future()
        self._began_s = context.clock()
        self._steps: dict[str, float] = {}  # step -> seconds into the run it first came
        self._changes = 0
        self._said_nowhere = False  # that silent bookies had nowhere to go, logged once

    def _step(self, name: str) -> None:
        self._steps.setdefault(name, self._context.clock() - self._began_s)

    def log_steps(self) -> None:
        """Says when each step of this run came: IN_RECOVERY written, the first reads past
        the fenced LAC, the first re-add, every re-add acknowledged."""
        took = self._context.clock() - self._began_s
        steps = ", ".join(f"{name} {at:.3f} s" for name, at in self._steps.items())
        level = logging.INFO if took > SLOW_RECOVERY_S else logging.DEBUG
        log.log(
            level, "ledger %d recovered in %.3f s (%s; %d ensemble changes)",
            self.ledger_id, took, steps, self._changes,
        )  # fmt: skip

    async def run(self) -> VersionedMetadata:
        self._marking = asyncio.ensure_future(self._mark())
        self._marking.add_done_callback(lambda _: self._step("marked"))
        self._runner.pump()
        timeout_s = self._context.config.recovery_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                return await self._done
        except TimeoutError:
            raise LedgerRecoveryTimeoutError(
                f"ledger {self.ledger_id}: recovery did not finish within {timeout_s} s; "
                f"bookies that did not answer: {self._describe_unanswered()}; the ledger stays "
                "IN_RECOVERY and a later recovery can finish it"
            ) from None
        finally:
            await self._runner.close()

    def _describe_unanswered(self) -> str:
        silent = self._failed | {b for b, n in self._waiting.items() if n > 0}
        if not silent:
            return "none (the metadata store was slow)"
        view = self._context.placement.cluster.by_id
        return ", ".join(f"{b} ({view[b].region})" if b in view else b for b in sorted(silent))

    async def _ask(self, bookie: str, request: Awaitable[E]) -> E:
        """Awaits one request to `bookie`, counted as unanswered until it returns, and the
        bookie as failed when its answer is a failure."""
        self._waiting[bookie] = self._waiting.get(bookie, 0) + 1
        try:
            event = await request
        finally:
            self._waiting[bookie] -= 1
        answer = event.event if isinstance(event, ReadOutcome) else event
        if isinstance(answer, FAILED):
            self._failed.add(bookie)
        return event

    def _execute(self, action: RecoveryAction) -> None:
        match action:
            case SendReadLac():
                self._runner.spawn(self._fence(action.bookie))
            case SendRead():
                self._step("reads")
                self._runner.spawn(self._read(action))
            case CompleteRead():
                body = self._bodies[(action.entry_id, action.bookie)]
                self._recovered[action.entry_id] = self.tail[action.entry_id] = body
                if len(self.tail) > TAIL_KEPT:
                    del self.tail[min(self.tail)]
                for key in [k for k in self._bodies if k[0] == action.entry_id]:
                    del self._bodies[key]
            case SendAdd():
                self._step("re-adds")
                self._runner.spawn(self._add(action))
            case CompleteAdds():
                for entry_id in range(action.first_entry_id, action.last_entry_id + 1):
                    self._recovered.pop(entry_id, None)
            case ChangeEnsemble():
                self._change_ensemble(action)
            case CloseLedger():
                self._step("re-added")
                self._runner.spawn(self._close(action))
            case FailRecovery():
                self._fail(action.message)
            case RecordHealth():
                self._context.record_health(action)

    async def _fence(self, bookie: str) -> None:
        fence = not runtime.broken(runtime.SKIP_FENCING)
        self._runner.feed(await self._ask(bookie, self._requests.last(bookie, fence=fence)))

    async def _read(self, action: SendRead) -> None:
        fence = action.fence and not runtime.broken(runtime.SKIP_FENCING)
        read = await self._ask(action.bookie, self._requests.read(action, fence=fence))
        if read.payload is not None:
            self._bodies[(action.entry_id, action.bookie)] = read.payload
        self._runner.feed(read.event)

    async def _add(self, action: SendAdd) -> None:
        payload = self._recovered.get(action.entry_id)
        if payload is None or await self._confirmed() is None:
            return
        answer = await self._ask(action.bookie, self._requests.add(action, payload))
        if isinstance(answer, AddAcked) and self._state.wants_ack_time(answer.entry_id):
            # the quorum lag counts from an entry's first ack: the machine must know its time
            self._runner.feed(Ticked(self._context.clock()))
        self._runner.feed(answer)

    def _change_ensemble(self, action: ChangeEnsemble) -> None:
        # Recovery's changes are written with the close (persist is False), so decide now.
        assert not action.persist, action
        try:
            ensemble = self._context.replace(
                self._versioned.metadata, self._ensemble, action.bookies, action.silent
            )
        except (PlacementError, GlobelogError) as err:
            if action.only_silent and isinstance(err, NotEnoughBookiesError):
                # Nowhere to move a silent bookie: a slow one's re-add is waited for (up to
                # the add timeout), a lost one asked again after a wait (bounded by
                # ensemble_changes_max), as a writer does.
                if not self._said_nowhere:
                    self._said_nowhere = True
                    say_nowhere(self.ledger_id, "recovery", action.bookies, err)
                if action.lagging:
                    self._runner.feed(EnsembleChanged(action.first_entry_id, self._ensemble))
                else:
                    self._runner.spawn(self._same_again(action.first_entry_id))
                return
            self._runner.feed(EnsembleChangeFailed(AddErrorKind.ENSEMBLE_CHANGE_FAILED, str(err)))
            return
        self._unchanged_backoff_s = UNCHANGED_FIRST_S
        self._changes += 1
        for bookie in action.bookies:
            self._context.placement.record_failure(bookie, self._context.clock())
        log.info(
            "ledger %d: recovery re-adds from entry %d, %s replaced by %s (%s)",
            self.ledger_id, action.first_entry_id, ", ".join(action.bookies),
            ", ".join(b for b in ensemble if b not in self._ensemble),
            "slow to acknowledge" if action.lagging else "failed",
        )  # fmt: skip
        self._ensemble = ensemble
        self._runner.feed(EnsembleChanged(action.first_entry_id, ensemble))

    async def _same_again(self, first_entry_id: int) -> None:
        """The same bookies again after a wait that doubles (a lost one's connection fails
        at once while it backs off: asked again at once, 64 changes went by in 0.2 s)."""
        await asyncio.sleep(self._unchanged_backoff_s)
        self._unchanged_backoff_s = min(2 * self._unchanged_backoff_s, UNCHANGED_MAX_S)
        self._runner.feed(Ticked(self._context.clock()))
        self._runner.feed(EnsembleChanged(first_entry_id, self._ensemble))

    async def _close(self, action: CloseLedger) -> None:
        def change(metadata: LedgerMetadata) -> LedgerMetadata:
            if metadata.state is LedgerState.CLOSED:
                raise _AlreadyClosedError
            for ensemble in action.ensembles:
                metadata = with_ensemble(metadata, ensemble)
            return dataclasses.replace(
                metadata,
                state=LedgerState.CLOSED,
                last_entry_id=action.last_entry_id,
                length=action.length,
            )

        marked = await self._confirmed()
        if marked is None:
            return
        if not self._write_close:
            self.closing = change(marked.metadata)  # IN_RECOVERY, ours: not CLOSED
            if not self._done.done():
                self._done.set_result(marked)
            return
        try:
            closed = await update_metadata(self._context.metadata, marked, change)
        except _AlreadyClosedError:
            closed = await self._context.metadata.read(self.ledger_id)
        except GlobelogError as err:
            self._fail(f"closing the metadata failed: {err}")
            return
        if not self._done.done():
            self._done.set_result(closed)

    async def _confirmed(self) -> VersionedMetadata | None:
        """The metadata once IN_RECOVERY landed on the ensembles this run read; None, the run
        ended, when it could not land or they had moved. Re-adds wait for it as the close
        does: a re-add of a run that then starts again (to a replacement bookie this run
        chose, say) would leave its LAC on bookies the next run reads."""
        try:
            marked = await self._marked()
        except (_AlreadyClosedError, GlobelogError) as err:
            self._end(err)
            return None
        if self._moved(marked):
            self._end(_EnsembleMovedError(marked))
            return None
        return marked

    async def moved_ensemble(self) -> VersionedMetadata | None:
        """After a failed run: the metadata IN_RECOVERY was written over, when it holds other
        ensembles than the run read (the old writer moved them first)."""
        if self._marking is None:
            return None
        try:
            marked = await self._marked()
        except (_AlreadyClosedError, GlobelogError):
            return None
        return marked if self._moved(marked) else None

    async def _marked(self) -> VersionedMetadata:
        """The IN_RECOVERY write's outcome (never cancelled by a waiter going away)."""
        assert self._marking is not None, "not running"
        return await asyncio.shield(self._marking)

    def _moved(self, marked: VersionedMetadata) -> bool:
        return marked.metadata.ensembles != self._versioned.metadata.ensembles

    def let_marking_go(self) -> None:
        """A run that ended before its IN_RECOVERY write did leaves it to land (or fail) on
        its own, its outcome retrieved."""
        if self._marking is not None and not self._marking.done():
            self._marking.add_done_callback(_retrieve)

    def _end(self, err: BaseException) -> None:
        """Ends the run with `err` as it is (IN_RECOVERY could not be written, or was
        written over something else than this recovery read)."""
        if not self._done.done():
            self._done.set_exception(err)

    def _fail(self, message: str) -> None:
        if not self._done.done():
            self._done.set_exception(
                LedgerRecoveryError(f"ledger {self.ledger_id}: recovery failed: {message}")
            )


def _retrieve(future: asyncio.Future[VersionedMetadata]) -> None:
    if not future.cancelled():
        future.exception()


__all__ = ["Recovered", "recover"]
