"""LogWriter: the asyncio driver of `LogWriterState` for one stream (library mode).

    writer = await LogWriter.open(streams, ledgers, "orders", WriterConfig(region="us-east"))
    dlsn = await writer.write(Record(b"payload"))
    await writer.close()

Opening takes the stream's ownership lock, fences and recovers the previous owner's
in-progress segment and starts a new segment (a new epoch). Writes are pipelined: `write`
and `write_bulk` return DLSNs in order. Every await ends: adds are bounded by the ledger's
timeouts, and open, roll and close by `WriterConfig`'s named bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections import deque
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.entry_format import Codec, encode_entry
from core.errors import (
    BadVersionError,
    EndOfStreamError,
    GlobelogError,
    StreamError,
    WriterClosedError,
)
from core.records import Record
from core.segments import SegmentMetadata
from core.streams import (
    StreamSettings,
)
from core.topology import Replication
from global_meta import SessionState
from global_meta.streams import OwnerLock, StreamCounters, StreamMetaStore, VersionedSegment
from ledger import LedgerClient, LedgerFencedError, LedgerWriter
from writer.bulk import Batch, Run
from writer.events import (
    CloseSegment,
    CompleteWrites,
    EntryAcked,
    EntryFailed,
    FailureKind,
    FailWrites,
    RollRequested,
    RollSegment,
    SegmentStarted,
    SegmentSummary,
    Ticked,
    TransmitEntry,
    WriterAction,
    WriterEvent,
    WriterFailed,
    Written,
)
from writer.recovery import recover_segment, recovered
from writer.segment_start import Completing, LedgerInAdvance, now_ms, start_segment
from writer.state import LogWriterState, Phase, SegmentStart

log = logging.getLogger(__name__)

OPEN_TIMEOUT_S = 60.0  # ownership, recovery of the last segment and a new segment
ROLL_TIMEOUT_S = 30.0  # closing a segment and starting the next
CLOSE_TIMEOUT_S = 30.0  # flushing, waiting for acks and completing the segment
# a take's early read through the reads session, once the lock is won: past it, the stream is
# read again through the main session
EARLY_READ_WAIT_S = 1.0
CLOCK_STEP_S = 0.001  # a write or an ack tells the machine the time when it moved this much


def default_owner() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class WriterConfig:
    region: str
    replication: Replication
    settings: StreamSettings = field(default_factory=StreamSettings)
    owner: str = field(default_factory=default_owner)
    open_timeout_s: float = OPEN_TIMEOUT_S
    roll_timeout_s: float = ROLL_TIMEOUT_S
    close_timeout_s: float = CLOSE_TIMEOUT_S
    # the owner ("name@region") whose lock `open` waits to go: it stops waiting when another
    # writer takes the lock instead (see StreamMetaStore.acquire)
    lock_waits_for: str | None = None


async def _segments_and_counters(
    streams: StreamMetaStore, stream: str
) -> tuple[list[VersionedSegment], StreamCounters]:
    segments, counters = await asyncio.gather(streams.segments(stream), streams.counters(stream))
    return segments, counters


def _discard_later(ledgers: LedgerClient, advance: LedgerInAdvance | None) -> None:
    """A ledger made in advance and not taken (a take that failed, or whose start made its
    own): deleted beside the caller, whose answer does not wait for it (a lost race is
    redirected at once) and whose end does not cut it short (see `LedgerClient.tidy`)."""
    if advance is not None and not advance.taken:
        ledgers.tidy(advance.discard(), f"deleting ledger made in advance for {advance.stream!r}")


async def _dropped(task: asyncio.Future[Any] | None) -> None:
    """Cancels a read no longer wanted and waits for it to end (its error dropped with it)."""
    if task is None:
        return
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()


class LogWriter:
    """The one writer of a stream. Use `await LogWriter.open(...)`; `async with` closes it."""

    def __init__(
        self,
        streams: StreamMetaStore,
        ledgers: LedgerClient,
        stream: str,
        config: WriterConfig,
        lock: OwnerLock,
        segment: VersionedSegment,
        ledger: LedgerWriter,
        max_txid: int,
    ) -> None:
        self.stream = stream
        self.config = config
        self._streams = streams
        self._ledgers = ledgers
        self._lock = lock
        self._segment = segment
        self._ledger = ledger
        self._codec = Codec.named(config.settings.compression)
        self._loop = asyncio.get_running_loop()
        start = SegmentStart(segment.segment.sequence, segment.segment.first_seq, max_txid)
        self._clock_s = self._loop.time()  # the time the machine was last told
        self._wall_ms = now_ms()  # the wall time then: a txid's floor
        self._state = LogWriterState(stream, config.settings, start, self._clock_s)
        # What waits for each write: its own future, or the batch of a write_bulk call.
        self._futures: dict[int, asyncio.Future[Written]] = {}
        self._runs: deque[Run] = deque()  # bulk writes, oldest first
        self.last_written: Written | None = None  # the newest acknowledged write
        self._room = asyncio.Event()
        self._room.set()
        self._blocked: deque[tuple[int, bytes]] = deque()  # transmits waiting for ledger room
        self._drainer: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # uvloop's call_at gives a plain Handle (no when()) for a time already past: the
        # wake-up time is kept here instead
        self._timer: asyncio.Handle | None = None
        self._timer_at = 0.0
        self._finished: asyncio.Future[None] = self._loop.create_future()
        self._released = False
        # how long each step of taking the stream took (s): its lock, the reads of its
        # segments and counters, the last segment's recovery, the new segment's start
        # (LogWriter.open fills it)
        self.open_steps: dict[str, float] = {}
        self._spawn(self._watch_session())
        self._spawn(self._watch_lock())

    # ---------------------------------------------------------------------------- open

    @classmethod
    async def open(
        cls, streams: StreamMetaStore, ledgers: LedgerClient, stream: str, config: WriterConfig
    ) -> LogWriter:
        """Takes ownership of `stream` and starts a new segment; OwnershipError if another
        writer keeps it past `settings.lock_timeout_s`."""
        clock = asyncio.get_running_loop().time
        began = clock()
        async with asyncio.timeout(config.open_timeout_s):
            # Queued behind a gone owner, the take reads the stream while it waits: read once
            # the lock is won, those reads would wait in this process's one ZooKeeper session
            # behind the writes of any other take under way (0.3-0.5 s on a WAN). A view the
            # last owner changed afterwards fails a compare-and-set, and the take reads again.
            # With a session for reads (a write proxy's), every take reads so, beside its
            # lock: a lock found free (its owner's session just ended) is no wait to read in,
            # but the reads after it would queue all the same.
            early = advance = None
            if config.lock_waits_for is not None or streams.unordered is not streams:
                early = asyncio.ensure_future(_segments_and_counters(streams.unordered, stream))
                # and the new segment's ledger made meanwhile too: from a region far from
                # ZooKeeper's leader, its two writes were the longest wait after the recovery
                advance = LedgerInAdvance(streams, ledgers, stream, config.replication, early)
            try:
                lock = await streams.acquire(
                    stream,
                    config.owner,
                    config.region,
                    config.settings.lock_timeout_s,
                    config.lock_waits_for,
                )
            except BaseException:
                await _dropped(early)
                _discard_later(ledgers, advance)
                raise
            steps = {"lock": clock() - began}
            try:
                try:
                    writer = await cls._take_over(
                        streams, ledgers, stream, config, lock, steps, early, advance
                    )
                except BadVersionError:
                    # the metadata moved under the take: an early read gone stale, or the
                    # last ledger closed meanwhile (by a rebuilder, while the stream had no
                    # owner): once more, from the metadata as it is now
                    steps = {"lock": steps["lock"], "stale": clock() - began - steps["lock"]}
                    writer = await cls._take_over(
                        streams, ledgers, stream, config, lock, steps, advance=advance
                    )
            except BaseException:
                await _dropped(early)
                await asyncio.shield(streams.release(lock))
                _discard_later(ledgers, advance)
                raise
            writer.open_steps = steps
            _discard_later(ledgers, advance)  # nothing, when the start took it
            return writer

    @classmethod
    async def _take_over(
        cls,
        streams: StreamMetaStore,
        ledgers: LedgerClient,
        stream: str,
        config: WriterConfig,
        lock: OwnerLock,
        steps: dict[str, float],
        early: asyncio.Future[tuple[list[VersionedSegment], StreamCounters]] | None = None,
        advance: LedgerInAdvance | None = None,
    ) -> LogWriter:
        """Recovers what the last owner left and starts a segment; `steps` gets how long the
        recovery and the start took (seconds). `early`: the stream's segments and counters
        as read while queued for the lock (read now if it failed); `advance`: the new
        segment's ledger, made meanwhile."""
        clock = asyncio.get_running_loop().time
        began = clock()
        read: tuple[list[VersionedSegment], StreamCounters] | None = None
        if early is not None:
            # read again, below, if it failed; through a session of its own (which may be
            # away or slow while this process's main one serves), waited for a while only
            bound_s = None if streams.unordered is streams else EARLY_READ_WAIT_S
            with contextlib.suppress(GlobelogError, TimeoutError):
                async with asyncio.timeout(bound_s):
                    read = await early
        segments, counters_read = read or await _segments_and_counters(streams, stream)
        counters: StreamCounters | None = counters_read
        steps["segments"] = clock() - began
        # Only the last segment is normally in progress (a writer that died); one before it
        # is left by a start that failed after creating the next.
        for index, versioned in enumerate(segments[:-1]):
            if versioned.segment.is_in_progress:
                segments[index] = await recover_segment(streams, ledgers, stream, versioned, lock)
                counters = None  # its completion moved them: the start reads them again

        async def recover_last() -> Completing:
            last = segments[-1] if segments else None
            if last is not None and last.segment.is_in_progress:
                completed, close = await recovered(streams, ledgers, stream, last)
                steps["recovery"] = clock() - began - steps["segments"]
                if not completed.end_of_stream:
                    return last, completed, close
                last = await streams.complete_segment(stream, last, completed, lock, close)
            if last is not None and last.segment.end_of_stream:
                raise EndOfStreamError(
                    f"stream {stream!r} was sealed with an end of stream at "
                    f"{last.segment.last_dlsn}"
                )
            return None

        # the new segment's ledger is made while the last segment is recovered
        segment, ledger, max_txid = await start_segment(
            streams, ledgers, stream, config.replication, config.region, lock, recover_last,
            counters, advance,
        )  # fmt: skip
        steps["start"] = clock() - began - steps["segments"] - steps.get("recovery", 0.0)
        return cls(streams, ledgers, stream, config, lock, segment, ledger, max_txid)

    # ----------------------------------------------------------------------------- API

    @property
    def segment(self) -> SegmentMetadata:
        return self._segment.segment

    @property
    def last_txid(self) -> int:
        return self._state.last_txid

    @property
    def next_seq(self) -> int:
        """The sequence id the next record written will get, if every pending write lands."""
        return self._state.next_seq

    @property
    def open_bookies(self) -> tuple[str, ...]:
        """The bookies the open ledger's next entries go to (its last ensemble)."""
        return self._ledger.metadata.ensembles[-1].bookies

    def roll_now(self) -> None:
        """Starts the next segment once the entries in flight are acknowledged: its ensemble
        is placed afresh (away from bookies that are leaving). Nothing happens to an empty
        segment or one already rolling or closing."""
        self._feed(RollRequested())

    @property
    def failed(self) -> bool:
        """The writer failed or was fenced: every later write fails; open a new one."""
        return self._state.error is not None

    @property
    def pending_writes(self) -> int:
        """Writes accepted and not yet acknowledged or failed."""
        return self._state.pending_writes

    def check_write(self, record: Record) -> None:
        """Raises the error a write of `record` would give now, changing nothing."""
        self._state.check_write(record)

    def check_batch(self, records: Sequence[Record | bytes]) -> None:
        """Raises the error `write_bulk(records)` would give now, changing nothing."""
        self._state.check_batch(records)

    @property
    def has_room(self) -> bool:
        return self._state.room > 0

    def write_nowait(self, record: Record) -> asyncio.Future[Written]:
        """Accepts one record now (pipelined); the future gives its DLSN, txid and sequence
        id once acknowledged.

        Raises at once for a bad record or a finished writer; the caller must have room
        (`await wait_for_room()`), or use `write`, which waits for it.
        """
        state = self._state
        now = self._loop.time()
        ticked = now - self._clock_s >= CLOCK_STEP_S
        if ticked:
            self._tell_time(now)
        flush_due = state.flush_due_s
        write_id = state.write(record, self._wall_ms)
        future: asyncio.Future[Written] = self._loop.create_future()
        self._futures[write_id] = future
        if state.room <= 0:
            self._room.clear()
        if state.has_actions:
            self._pump()
        elif ticked or state.flush_due_s != flush_due:
            # a write without actions moves no wake-up but the buffer's flush (and a tick's)
            self._arm()
        return future

    async def wait_for_room(self) -> None:
        while self._state.room <= 0 and not self._state.is_terminal:
            self._room.clear()
            await self._room.wait()

    async def write(self, record: Record | bytes) -> Written:
        """Appends one record; where it was written once acknowledged."""
        if isinstance(record, bytes):
            record = Record(record)
        self._state.check_write(record)
        await self.wait_for_room()
        return await self.write_nowait(record)

    async def write_bulk(self, records: Sequence[Record | bytes]) -> list[Written]:
        """Appends records in order (one entry or more); each one's result once all are
        acknowledged.

        Every record is checked before any is accepted, so a bad record writes nothing.
        """
        batch = records
        self._state.check_batch(batch)
        if not batch:
            return []
        waiter = Batch(self._loop.create_future(), len(batch))
        state = self._state
        done = 0
        while done < len(batch):
            if state.room <= 0:
                self._pump()
                await self.wait_for_room()
                state.check_batch(batch[done:])  # the writer may have failed meanwhile
            self._advance_clock()
            chunk = batch[done : done + state.room]
            first_id = state.write_batch(chunk, now_ms())
            # One waiter per run of write ids: no future or callback per record.
            self._runs.append(Run(first_id, first_id + len(chunk), waiter, done))
            done += len(chunk)
            if state.has_actions:  # full entries go out now, not at the end of the batch
                self._pump()
        self.flush()
        return await waiter.future

    def flush(self) -> None:
        """Transmits the buffered records now, whatever the transmit policy."""
        self._state.flush()
        self._pump()

    async def mark_session(self) -> int:
        """Writes a session marker (a control record readers never see) once the writes before
        it landed; its txid, above every earlier one: the id of a new write session."""
        return (await self._control()).txid

    def start_session(self) -> int:
        """Writes a session marker without waiting for it; its txid, the new session's id.
        Entries are acknowledged in order and a write that fails fails the writer, so no write
        after the marker is acknowledged without it: the session is durable before anything
        written in it is."""
        write_id = self._state.mark_session(now_ms())
        future: asyncio.Future[Written] = self._loop.create_future()
        future.add_done_callback(_retrieve)  # its failure is every later write's
        self._futures[write_id] = future
        self._pump()
        return self._state.last_txid

    async def heartbeat(self) -> Written:
        """Writes a control record (readers never see it) and waits for it: the writes before
        it are acknowledged and readable in every region once it returns, and this writer
        still owns the stream (a fenced one fails instead). Where the record landed."""
        return await self._control()

    async def _control(self) -> Written:
        write_id = self._state.mark_session(now_ms())
        future: asyncio.Future[Written] = self._loop.create_future()
        self._futures[write_id] = future
        self._pump()
        async with asyncio.timeout(self.config.close_timeout_s):
            return await future

    async def mark_end_of_stream(self) -> int:
        """Seals the stream (readers see its end, writers get end_of_stream); the last txid."""
        write_id = self._state.mark_end_of_stream(now_ms())
        future: asyncio.Future[Written] = self._loop.create_future()
        self._futures[write_id] = future
        self._pump()
        async with asyncio.timeout(self.config.close_timeout_s):
            await future
            await self._finished
        return self._state.last_txid

    async def close(self) -> None:
        """Transmits the buffer, waits for the acks, completes the segment, releases the lock.

        Raises the writer's failure, if it failed (after releasing what it holds).
        """
        self._state.close()
        self._pump()
        try:
            async with asyncio.timeout(self.config.close_timeout_s):
                await asyncio.shield(self._finished)
        except TimeoutError:
            self._feed(WriterFailed(FailureKind.CLOSED, "close timed out"))
            raise WriterClosedError(
                f"stream {self.stream!r}: close did not finish within "
                f"{self.config.close_timeout_s} s"
            ) from None
        finally:
            await self._shutdown()

    async def abandon(self, *, release_lock: bool = False) -> None:
        """Stops without completing the segment, as a crashed writer would (tests, drills).

        `release_lock`: also give up the ownership lock (still held if this writer's session
        lives), so that another writer can take the stream at once: its recovery completes
        the segment. A failed writer that keeps its lock would block the stream until its
        process ends.
        """
        self._feed(WriterFailed(FailureKind.CLOSED, "the writer was abandoned"))
        await self._ledger.abandon()
        await self._shutdown(release=release_lock)

    async def __aenter__(self) -> LogWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if exc[0] is None:
            await self.close()
        else:
            with contextlib.suppress(GlobelogError):
                await self.close()

    # ------------------------------------------------------------------------ driving

    def _feed(self, event: WriterEvent) -> None:
        self._state.handle(event)
        self._pump()

    def _pump(self) -> None:
        while actions := self._state.take_actions():
            for action in actions:
                self._execute(action)
        if self._state.error is not None:
            # A failure ends close() too, even with no write pending to carry it.
            self._finish(self._error())
        self._arm()

    def _arm(self) -> None:
        wakeup = self._state.next_wakeup_s()
        if self._timer is not None:
            if wakeup is not None and self._timer_at == wakeup:
                return
            self._timer.cancel()
            self._timer = None
        if wakeup is not None:
            self._timer = self._loop.call_at(wakeup, self._tick)
            self._timer_at = wakeup

    def _tick(self) -> None:
        self._timer = None
        self._tell_time(self._loop.time())
        self._pump()

    def _advance_clock(self) -> None:
        """Tells the machine the time before it decides on a write or an ack: deadlines it
        sets (the periodic flush, the control record) count from now, not from its last tick.
        """
        now = self._loop.time()
        if now - self._clock_s >= CLOCK_STEP_S:
            self._tell_time(now)

    def _tell_time(self, now: float) -> None:
        """Moves the machine's clock and the wall time writes take their txids from (read
        once per CLOCK_STEP_S, not per record); its actions go out with the caller's pump."""
        self._clock_s = now
        self._wall_ms = now_ms()
        self._state.handle(Ticked(now))

    def _execute(self, action: WriterAction) -> None:
        match action:
            case TransmitEntry():
                self._transmit(action)
            case CompleteWrites():
                self._deliver(action.results)
            case FailWrites():
                self._fail_writes(action)
            case RollSegment():
                self._spawn(self._roll(action.summary))
            case CloseSegment():
                self._spawn(self._close_segment(action.summary))

    def _transmit(self, action: TransmitEntry) -> None:
        payload = encode_entry(
            action.records,
            first_position=action.first_position,
            write_time_ms=now_ms(),  # afresh (once an entry): never before its segment began
            region=self.config.region,
            codec=self._codec,
        )
        if self._blocked or not self._ledger.has_room():
            self._blocked.append((action.transmit_id, payload))
            if self._drainer is None:
                self._drainer = self._loop.create_task(self._drain())
                # its failure fails the writer, as any task of the writer's (I8): the writes
                # it holds would otherwise wait for ever
                self._drainer.add_done_callback(self._task_done)
            return
        self._append(action.transmit_id, payload)

    def _append(self, transmit_id: int, payload: bytes) -> None:
        try:
            future = self._ledger.append(payload)
        except GlobelogError as err:
            self._feed(EntryFailed(transmit_id, _failure_kind(err), str(err)))
            return
        future.add_done_callback(lambda f: self._added(transmit_id, f))

    def _added(self, transmit_id: int, future: asyncio.Future[int]) -> None:
        self._advance_clock()
        if future.cancelled():
            self._feed(EntryFailed(transmit_id, FailureKind.TRANSMIT, "the add was cancelled"))
        elif (err := future.exception()) is not None:
            self._feed(EntryFailed(transmit_id, _failure_kind(err), str(err)))
        else:
            self._feed(EntryAcked(transmit_id, future.result()))

    async def _drain(self) -> None:
        """Appends the transmits that waited for the ledger's room, in order."""
        try:
            while self._blocked:
                await self._ledger.wait_for_room()
                while self._blocked and self._ledger.has_room():
                    self._append(*self._blocked.popleft())
        finally:
            self._drainer = None

    def _deliver(self, results: tuple[tuple[int, Written], ...]) -> None:
        """Hands each acknowledged write to its waiter: write ids complete in order, so a
        bulk write's run is always the oldest one left."""
        futures = self._futures
        runs = self._runs
        self.last_written = results[-1][1]
        if not runs:  # single writes only (write_nowait's path): no run to look for
            for write_id, written in results:
                future = futures.pop(write_id)
                if not future.done():
                    future.set_result(written)
            self._room.set()
            return
        for write_id, written in results:
            if runs and runs[0].first_id <= write_id:
                run = runs[0]
                run.batch.done(run.offset + write_id - run.first_id, written)
                if write_id + 1 == run.end_id:
                    runs.popleft()
                continue
            future = futures.pop(write_id)
            if not future.done():
                future.set_result(written)
        self._room.set()

    def _fail_writes(self, action: FailWrites) -> None:
        """The machine fails every pending write at once: every bulk write fails with them."""
        error = self._error()
        waiting: list[asyncio.Future[Any] | None] = [
            self._futures.pop(w, None) for w in action.write_ids
        ]
        waiting += [run.batch.future for run in self._runs]
        self._runs.clear()
        for future in waiting:
            if future is not None and not future.done():
                future.set_exception(error)
                future.exception()  # a caller that gave up on it must not warn
        self._room.set()

    def _error(self) -> StreamError:
        return self._state.failure()

    # ---------------------------------------------------------------------- segments

    async def _roll(self, summary: SegmentSummary) -> None:
        async def close_last() -> Completing:
            await self._ledger.close()
            return self._segment, self._completed(summary), ()

        async with asyncio.timeout(self.config.roll_timeout_s):
            config = self.config
            # the next segment's ledger is made while this one's closes
            segment, ledger, _ = await start_segment(
                self._streams,
                self._ledgers,
                self.stream,
                config.replication,
                config.region,
                self._lock,
                close_last,
            )
        self._segment, self._ledger = segment, ledger
        started = segment.segment
        self._feed(SegmentStarted(started.sequence, started.first_seq, self._loop.time()))

    async def _complete(self, summary: SegmentSummary) -> None:
        await self._ledger.close()
        self._segment = await self._streams.complete_segment(
            self.stream, self._segment, self._completed(summary), self._lock
        )

    def _completed(self, summary: SegmentSummary) -> SegmentMetadata:
        return self._segment.segment.completed(
            summary.last_txid,
            summary.last_dlsn,
            summary.record_count,
            now_ms(),
            summary.end_of_stream,
        )

    async def _close_segment(self, summary: SegmentSummary) -> None:
        await self._complete(summary)
        self._finish(None)

    def _finish(self, error: StreamError | None) -> None:
        if self._finished.done():
            return
        if error is None:
            self._finished.set_result(None)
        else:
            self._finished.set_exception(error)
            self._finished.exception()  # nobody may be waiting: no warning

    async def _watch_session(self) -> None:
        """Ownership ends with the ZooKeeper session: fail every write when it expires."""
        async for event in self._streams.store.session_events():
            if event.state is SessionState.EXPIRED:
                self._feed(WriterFailed(FailureKind.OWNERSHIP, "the ZooKeeper session expired"))
                return

    async def _watch_lock(self) -> None:
        """Ownership ends with the lock node too: a proxy that a client sent here naming this
        writer's proxy unreachable, and whose connection to it was refused, deletes it
        (region.ownership) while this session lives on. Every write fails then, as when the
        session expires; nothing could be acknowledged anyway (the new owner fences the
        ledger, and every segment write checks the lock node). A watch that cannot be kept
        (ZooKeeper away) leaves that to the fencing."""
        try:
            async for found in self._streams.store.watch_data(self._lock.path):
                if found is None and not self._released:
                    self._feed(
                        WriterFailed(FailureKind.OWNERSHIP, "its ownership lock node is gone")
                    )
                    return
        except GlobelogError as err:
            log.info("stopped watching the lock of %s: %s", self.stream, err)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Runs `work` as a task this writer owns; its failure fails the writer (I8)."""
        task = self._loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        err = task.exception()
        if err is None:
            return
        if isinstance(err, TimeoutError):
            reason = "a segment roll or close did not finish in time"
        else:
            reason = f"{type(err).__name__}: {err}"
        kind = _failure_kind(err) if isinstance(err, GlobelogError) else FailureKind.ROLL
        if not isinstance(err, GlobelogError):
            log.error("writer task failed", exc_info=err, extra={"stream": self.stream})
        self._feed(WriterFailed(kind, reason))
        self._finish(self._error())

    async def _shutdown(self, *, release: bool = True) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        tasks = [*self._tasks, *([self._drainer] if self._drainer else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._state.phase is not Phase.CLOSED:
            await self._ledger.abandon()
        if release and not self._released:
            self._released = True
            with contextlib.suppress(GlobelogError):
                await self._streams.release(self._lock)


def _failure_kind(err: BaseException) -> FailureKind:
    return FailureKind.FENCED if isinstance(err, LedgerFencedError) else FailureKind.TRANSMIT


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
