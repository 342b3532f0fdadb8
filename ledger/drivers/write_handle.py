"""LedgerWriter: appends entries to one ledger through `AddState`, and closes it.

`append` submits at once and returns a future (pipelining without a task per entry);
`add` awaits it. Completions arrive strictly in entry order, at the ack quorum.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

from core import runtime
from core.errors import GlobelogError
from ledger.codecs.entry import EntryCodec, master_key
from ledger.codecs.frames import AddFrames
from ledger.codecs.metadata import Ensemble, LedgerMetadata, LedgerState
from ledger.connections.bookie_client import SILENCE_EVIDENCE_S, add_frames
from ledger.drivers.context import (
    UNCHANGED_FIRST_S,
    UNCHANGED_MAX_S,
    LedgerContext,
    require_open,
    say_nowhere,
    update_metadata,
    with_ensemble,
)
from ledger.drivers.handle_errors import add_error, raise_bugs
from ledger.drivers.metadata_store import VersionedMetadata
from ledger.drivers.requests import LedgerRequests
from ledger.drivers.runner import MachineRunner
from ledger.errors import LedgerClosedError, LedgerFencedError, LedgerHandleError
from ledger.machines.add_events import (
    AddAcked,
    AddAction,
    AddError,
    AddErrorKind,
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
from ledger.machines.add_state import AddConfig, AddState
from ledger.machines.signals import Ticked, failure_kind
from placement import NotEnoughBookiesError, PlacementError

log = logging.getLogger(__name__)
ENTRY_BYTES_MAX = 5 * 1024 * 1024 - 1024  # a bookie frame is at most 5 MiB with headers
# How often an appending writer asks placement whether its ensemble, placed while a region
# was away, can spread over it again (`_respread`).
SPREAD_CHECK_S = 0.5
SPREAD_RETRY_S = 30.0  # after a move placement could not make
# A bookie counts as answering when it answered within this (the watch asks every 0.5 s).
ANSWERED_WITHIN_S = 1.5


class LedgerWriter:
    """The one writer of an OPEN ledger. Use `await client.create(...)` to get one."""

    def __init__(
        self, context: LedgerContext, versioned: VersionedMetadata, placed_s: float | None = None
    ) -> None:
        """`placed_s`: when placement chose the ledger's ensemble (its creation)."""
        metadata = versioned.metadata
        assert metadata.state is LedgerState.OPEN, metadata.state
        self.ledger_id = versioned.ledger_id
        self._context = context
        self._versioned = versioned
        self._codec = EntryCodec(self.ledger_id, metadata.digest_type, metadata.password)
        self._master_key = master_key(metadata.password)
        self._requests = LedgerRequests(
            context.bookies, self.ledger_id, self._codec, self._master_key
        )
        config = AddConfig(
            add_timeout_s=context.config.add_timeout_s,
            quorum_lag_s=context.config.quorum_lag_s,
        )
        self._state = AddState(
            metadata.current_ensemble,
            metadata.write_quorum,
            1 if runtime.broken(runtime.ACK_AT_ONE_COPY) else metadata.ack_quorum,
            now_s=context.clock(),
            config=config,
        )
        self._runner: MachineRunner[AddAction] = MachineRunner(
            self._state, self._execute, self._task_crashed
        )
        self._payloads: dict[int, bytes] = {}
        self._last_frames: tuple[tuple[int, int, int, bool], AddFrames] | None = None
        self._futures: dict[int, asyncio.Future[int]] = {}
        self._submitted_s: dict[int, float] = {}  # entry -> when appended (add latency)
        self._room = asyncio.Event()
        self._room.set()
        self._closed: asyncio.Future[VersionedMetadata] = asyncio.get_running_loop().create_future()
        self._unchanged_backoff_s = UNCHANGED_FIRST_S
        self._said_nowhere = False  # that silent bookies had nowhere to go, logged once
        self._placed_s = placed_s  # until the first append looks for failures since then
        self._spread_check_s = context.clock() + SPREAD_CHECK_S
        self._piggybacked_lac = self._state.lac  # the LAC the newest entry carried
        self._explicit_lac = self._state.lac  # the newest LAC sent with WRITE_LAC
        interval_s = context.config.explicit_lac_interval_s
        if interval_s > 0:
            self._runner.spawn(self._explicit_lac_loop(interval_s))

    # ------------------------------------------------------------------------------ API

    @property
    def lac(self) -> int:
        return self._state.lac

    @property
    def metadata(self) -> LedgerMetadata:
        return self._versioned.metadata

    def append(self, payload: bytes) -> asyncio.Future[int]:
        """Submits one entry now; the future gives its entry id once acknowledged.

        Raises LedgerHandleError at once when the handle is failed or closed. The caller
        must have room (`await wait_for_room()`), or use `add`, which waits for it.
        """
        if len(payload) > ENTRY_BYTES_MAX:
            raise LedgerHandleError(
                f"ledger {self.ledger_id}: entry is {len(payload)} bytes; the limit is {ENTRY_BYTES_MAX}"
            )
        if self._state.error is not None:
            raise self._refused(self._state.error)
        assert self._state.room > 0, "append() without room: await wait_for_room() first"
        if self._placed_s is not None:
            self._failures_since_placed(self._placed_s)
            self._placed_s = None
        # Stamp the machine's clock first: it times each add out from its send time. Feeding
        # (not just handling) runs whatever the tick decided, such as a failure, right away.
        now_s = self._context.clock()
        self._runner.feed(Ticked(now_s))
        if self._state.error is not None:
            raise self._refused(self._state.error)
        if now_s >= self._spread_check_s:
            self._spread_check_s = now_s + SPREAD_CHECK_S
            self._respread()
        self._piggybacked_lac = self._state.lac
        entry_id = self._state.submit(len(payload))
        if entry_id is None:
            raise self._refused(self._state.error or _closed_error())
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._futures[entry_id] = future
        self._payloads[entry_id] = payload
        self._submitted_s[entry_id] = self._context.clock()
        if self._state.room == 0:
            self._room.clear()
        self._runner.pump()
        return future

    def _failures_since_placed(self, placed_s: float) -> None:
        """Ensemble members this client saw fail after placement chose them count as silent
        from that failure. A new owner makes its segment's ledger while it recovers the last
        one, and the recovery may find bookies cut off: without this the first entries waited
        a whole quorum lag after their first ack before those bookies were replaced."""
        now_s = self._context.clock()
        for bookie in set(self._state.ensemble):
            failed_s = self._context.placement.silent_since_failure_s(bookie, now_s)
            if failed_s is not None and failed_s >= placed_s:
                self._state.failed_since(bookie, failed_s)
            # requests of other handles (a recovery's fences) it has not answered, now
            silent_s = self._context.bookies.silent_since_s(bookie, SILENCE_EVIDENCE_S)
            if silent_s is not None:
                self._state.failed_since(bookie, silent_s)

    def _respread(self) -> None:
        """Asks for a change that moves one bookie to a region the ensemble does not span,
        when placement finds one whose bookies answer again (an ensemble placed while that
        region was cut off). Changes only the machine; `append` pumps it."""
        ensemble = self._state.ensemble
        if not all(self._answers(b) for b in ensemble):
            return  # a member's own change (or its wait) comes first
        bookie = self._context.placement.member_to_spread(ensemble, self._answers)
        if bookie is not None:
            self._state.respread(ensemble.index(bookie))

    def _answers(self, bookie: str) -> bool:
        """Whether `bookie` answers this client now: it answered something within
        ANSWERED_WITHIN_S, after its last failure (a write proxy's bookie watch asks every
        bookie twice a second), nothing is pending there unanswered for long, and it is not
        backing off after failures. (Between two dials a bookie behind a cut has nothing
        pending and no backoff: only a recent answer tells it from one that answers.)"""
        now_s = self._context.clock()
        bookies = self._context.bookies
        return (
            self._context.placement.answered_lately(bookie, now_s, ANSWERED_WITHIN_S)
            and bookies.silent_since_s(bookie, SILENCE_EVIDENCE_S) is None
            and bookies.is_available(bookie)
        )

    def has_room(self) -> bool:
        return self._state.room > 0 or self._state.error is not None

    async def wait_for_room(self) -> None:
        """Waits while the handle has the maximum number of adds in flight (backpressure)."""
        while not self.has_room():
            await self._room.wait()

    async def add(self, payload: bytes) -> int:
        """Appends one entry and waits until it is acknowledged; returns its entry id."""
        await self.wait_for_room()
        return await self.append(payload)

    async def write_explicit_lac(self) -> int:
        """Sends the LAC to every bookie of the ensemble, so readers see the newest entries.

        The LAC otherwise rides on the next entry: with no next entry, readers would stop one
        short. Best effort, as in BookKeeper: a bookie that misses it gets the next one.
        """
        lac = self._state.lac
        body = self._codec.encode_lac(lac)
        bookies = self._state.ensemble

        async def send(bookie: str) -> None:
            await self._context.bookies.write_lac(
                bookie, self.ledger_id, lac, self._master_key, body
            )

        # best effort per bookie, but a failure that is not a bookie's (a bug) is raised
        results = await asyncio.gather(*(send(b) for b in bookies), return_exceptions=True)
        raise_bugs(results)
        if all(isinstance(r, BaseException) for r in results):
            raise LedgerHandleError(
                f"ledger {self.ledger_id}: no bookie took the explicit LAC {lac}"
            )
        self._explicit_lac = max(self._explicit_lac, lac)
        return lac

    async def _explicit_lac_loop(self, interval_s: float) -> None:
        """Every interval, sends the LAC if readers cannot see it from the entries."""
        while not self._state.is_terminal:
            await asyncio.sleep(interval_s)
            if self._state.lac > max(self._piggybacked_lac, self._explicit_lac):
                with contextlib.suppress(GlobelogError):
                    await self.write_explicit_lac()

    async def close(self) -> VersionedMetadata:
        """Waits for pending adds, then writes the metadata CLOSED at the LAC."""
        self._state.begin_close()
        self._runner.pump()
        try:
            return await self._closed
        finally:
            await self._runner.close()

    async def abandon(self) -> None:
        """Stops without closing the ledger (as a crashed writer would); for tests and drills."""
        await self._runner.close()
        for future in self._futures.values():
            if not future.done():
                future.set_exception(LedgerClosedError(f"ledger {self.ledger_id}: abandoned"))

    def _task_crashed(self, error: BaseException) -> None:
        self._runner.feed(TaskCrashed(f"{type(error).__name__}: {error}"))

    # ------------------------------------------------------------------------ actions

    def _execute(self, action: AddAction) -> None:
        match action:
            case SendAdd():
                self._send_now(action)
            case CompleteAdds():
                self._complete(action)
            case ForgetPayloads():
                for entry_id in action.entry_ids:
                    self._payloads.pop(entry_id, None)
                self._wake_if_room()
            case ChangeEnsemble():
                self._runner.spawn(self._change_ensemble(action))
            case FailAdds():
                self._fail(action.entry_ids, action.error)
            case CloseLedger():
                self._runner.spawn(self._close(action))
            case FailClose():  # the handle's end: copies owed to a change are not sent now
                self._payloads.clear()
                self._room.set()  # waiters wake and see the error (room may be owed copies')
                self._fail_close(add_error(self.ledger_id, action.error))

    def _send_now(self, action: SendAdd) -> None:
        """Sends on an open connection without a task when it can; otherwise spawns `_send`."""
        if action.last_use:  # a completed entry's copy for a new bookie: its last send
            payload = self._payloads.pop(action.entry_id, None)
            self._wake_if_room()
        else:
            payload = self._payloads.get(action.entry_id)
        if payload is None:
            self._skipped(action)
            return
        frames = self._frames(action, payload)

        def done(error: GlobelogError | None) -> None:
            if error is None:
                self._feed_ack(AddAcked(action.entry_id, action.bookie))
            else:
                self._runner.feed(AddFailed(action.entry_id, action.bookie, failure_kind(error)))

        sent = self._context.bookies.add_entry_nowait(
            action.bookie, self.ledger_id, action.entry_id, frames, action.recovery, done
        )
        if not sent:
            self._runner.spawn(self._send(action, payload))

    def _frames(self, action: SendAdd, payload: bytes) -> AddFrames:
        """The send's AddRequest (entry packet, digest included), encoded once for the write
        quorum: the sends of one entry come together and carry the same LAC and length."""
        key = (action.entry_id, action.lac, action.length, action.recovery)
        last = self._last_frames
        if last is not None and last[0] == key:
            return last[1]
        packet = self._codec.encode_entry(action.entry_id, action.lac, action.length, payload)
        frames = add_frames(
            self.ledger_id, action.entry_id, self._master_key, packet, action.recovery
        )
        self._last_frames = (key, frames)
        return frames

    def _skipped(self, action: SendAdd) -> None:
        """The entry completed (or failed) before this send went out: tell the machine, after
        the actions it is running now, so it does not wait for an answer that cannot come."""
        event = SendSkipped(action.entry_id, action.bookie)
        asyncio.get_running_loop().call_soon(self._runner.feed, event)

    async def _send(self, action: SendAdd, payload: bytes) -> None:
        if action.entry_id not in self._payloads and not action.owed:
            self._skipped(action)  # completed (or failed) while this task waited to start
            return
        answer = await self._requests.add(action, payload)
        if isinstance(answer, AddAcked):
            self._feed_ack(answer)
        else:
            self._runner.feed(answer)

    def _feed_ack(self, ack: AddAcked) -> None:
        """An entry's first ack comes with the clock: the quorum lag counts from it."""
        if self._state.wants_ack_time(ack.entry_id):
            self._runner.feed(Ticked(self._context.clock()))
        self._runner.feed(ack)

    def _complete(self, action: CompleteAdds) -> None:
        now_s = self._context.clock()
        latency = self._context.metrics.add_latency
        for entry_id in range(action.first_entry_id, action.last_entry_id + 1):
            if not action.keep_payloads:  # kept: copies owed to an ensemble change's bookies
                self._payloads.pop(entry_id, None)
            latency.record(now_s - self._submitted_s.pop(entry_id, now_s))
            future = self._futures.pop(entry_id)
            if not future.done():
                future.set_result(entry_id)
        self._context.metrics.adds.add(action.last_entry_id - action.first_entry_id + 1)
        self._wake_if_room()

    def _wake_if_room(self) -> None:
        if self._state.room > 0:
            self._room.set()

    def _refused(self, error: AddError) -> LedgerHandleError:
        """An entry offered to a failed or closed handle: it fails at once, and counts as a
        failed entry like one in flight when the handle failed (which entries those were
        depends on when a straggling answer reported the failure)."""
        failure = add_error(self.ledger_id, error)
        self._context.metrics.add_failures.add(1, {"code": failure.code})
        return failure

    def _fail(self, entry_ids: tuple[int, ...], error: AddError) -> None:
        failure = add_error(self.ledger_id, error)
        self._context.metrics.add_failures.add(len(entry_ids), {"code": failure.code})
        for entry_id in entry_ids:
            self._payloads.pop(entry_id, None)
            self._submitted_s.pop(entry_id, None)
            future = self._futures.pop(entry_id, None)
            if future is not None and not future.done():
                future.set_exception(failure)
        self._room.set()  # waiters wake and see the error
        if self._state.is_terminal:
            self._fail_close(failure)

    def _fail_close(self, failure: LedgerHandleError) -> None:
        if not self._closed.done():
            self._closed.set_exception(failure)
            self._closed.exception()  # a writer that never closes must not warn

    async def _change_ensemble(self, action: ChangeEnsemble) -> None:
        check = require_open(self.ledger_id)
        try:
            check(self._versioned.metadata)
            try:
                if action.respread:
                    ensemble = self._spread_to(action.bookies[0])
                else:
                    ensemble = self._context.replace(
                        self._versioned.metadata,
                        self._state.ensemble,
                        action.bookies,
                        action.silent,
                    )
            except NotEnoughBookiesError as err:
                if not action.only_silent:
                    raise
                if not self._said_nowhere:  # once per handle: it may wait many times
                    self._said_nowhere = True
                    say_nowhere(self.ledger_id, "the writer", action.bookies, err)
                # Nowhere to move a silent bookie: every usable one is in the ensemble, or the
                # others are not registered again yet after a cut. A slow one's adds are
                # waited for (up to the add timeout); a lost one is asked again after a wait
                # (bounded by ensemble_changes_max), rather than the writer failing and the
                # next owner recovering the segment from the same cut bookies.
                ensemble = tuple(self._state.ensemble)
            if tuple(ensemble) == tuple(self._state.ensemble):
                # Placement kept the same bookies (no better one usable now): an ensemble that
                # changes nothing is not written. Wait a little, then retry the same bookies;
                # slow ones (not failed: their adds are still in flight) are waited for as is.
                if action.respread:  # placement could not: ask again much later
                    self._spread_check_s = self._context.clock() + SPREAD_RETRY_S
                elif not action.lagging:
                    await asyncio.sleep(self._unchanged_backoff_s)
                    self._unchanged_backoff_s = min(2 * self._unchanged_backoff_s, UNCHANGED_MAX_S)
                self._context.metrics.ensemble_changes.add(1, {"outcome": "unchanged"})
                self._runner.feed(Ticked(self._context.clock()))
                self._runner.feed(EnsembleChanged(action.first_entry_id, ensemble))
                return
            self._unchanged_backoff_s = UNCHANGED_FIRST_S
            new = Ensemble(action.first_entry_id, ensemble)

            def change(metadata: LedgerMetadata) -> LedgerMetadata:
                check(metadata)
                return with_ensemble(metadata, new)

            self._versioned = await update_metadata(self._context.metadata, self._versioned, change)
        except LedgerFencedError as err:
            self._ensemble_change_failed(AddErrorKind.FENCED, err)
        except LedgerClosedError as err:
            self._ensemble_change_failed(AddErrorKind.CLOSED, err)
        except (GlobelogError, PlacementError) as err:
            # A move's failed write fails the writer too: whether it landed is unknown, and
            # acks counted from the old bookie would be where the metadata may not say.
            self._ensemble_change_failed(AddErrorKind.ENSEMBLE_CHANGE_FAILED, err)
        else:
            self._context.metrics.ensemble_changes.add(1, {"outcome": "changed"})
            for bookie in action.bookies if not action.respread else ():  # a move: none failed
                self._context.placement.record_failure(bookie, self._context.clock())
            log.info(
                "ledger %d: from entry %d, %s replaced by %s (%s)",
                self.ledger_id, action.first_entry_id, ", ".join(action.bookies),
                ", ".join(b for b in ensemble if b not in self._state.ensemble),
                _why(action),
            )  # fmt: skip
            # the re-sends to the new bookies are timed from now, not from the last add
            self._runner.feed(Ticked(self._context.clock()))
            self._runner.feed(EnsembleChanged(action.first_entry_id, ensemble))

    def _spread_to(self, bookie: str) -> tuple[str, ...]:
        """The ensemble with `bookie` moved to a region it does not span, among bookies
        that answer; the same ensemble when there is none now."""
        unreachable = [
            b.bookie_id
            for b in self._context.placement.cluster.bookies
            if not self._answers(b.bookie_id)
        ]
        metadata = self._versioned.metadata
        return self._context.spread(metadata, self._state.ensemble, bookie, unreachable)

    def _ensemble_change_failed(self, kind: AddErrorKind, err: GlobelogError) -> None:
        self._context.metrics.ensemble_changes.add(1, {"outcome": kind.value})
        self._runner.feed(EnsembleChangeFailed(kind, str(err)))

    async def _close(self, action: CloseLedger) -> None:
        check = require_open(self.ledger_id)

        def change(metadata: LedgerMetadata) -> LedgerMetadata:
            check(metadata)
            return dataclasses.replace(
                metadata,
                state=LedgerState.CLOSED,
                last_entry_id=action.last_entry_id,
                length=action.length,
            )

        try:
            self._versioned = await update_metadata(self._context.metadata, self._versioned, change)
        except GlobelogError as err:
            self._fail_close(LedgerHandleError(f"ledger {self.ledger_id}: close failed: {err}"))
            return
        if not self._closed.done():
            self._closed.set_result(self._versioned)


def _why(change: ChangeEnsemble) -> str:
    if change.respread:
        return "to span one more region"
    return "slow to acknowledge" if change.lagging else "failed"


def _closed_error() -> AddError:
    return AddError(AddErrorKind.CLOSED, "the handle is closing or closed")
