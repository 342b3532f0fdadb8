"""LedgerReader: reads entries up to the LAC with speculative, placement-ordered reads.

Each entry read is an `EntryReadState` fed by placement's read order and speculative delays;
LAC reads are a `ReadLacState`; tailing uses the bookies' long-poll read.

A reader holds the ledger's metadata as it was when opened, and the ensembles in it change
while it reads: the writer replaces a bookie it cannot reach (an open ledger), a rebuilder
moves a lost or decommissioned bookie's copies (any ledger). So the reader reads the metadata
again when the old ensembles stop serving it: when no bookie of an entry's write set has it or
answers, before reporting that, and while a tailing long poll brings nothing new (less and
less often while nothing comes: QUIET_CHECK_S_MIN, then doubling up to QUIET_CHECK_S_MAX).
(A bookie replaced at entry N never learns an LAC past N - 1; a long poll there would otherwise
wait in vain for ever, while the entries go on arriving elsewhere.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Literal

from core.errors import GlobelogError
from ledger.codecs.entry import EntryCodec
from ledger.codecs.messages import ReadResponse
from ledger.codecs.metadata import LedgerMetadata, LedgerState
from ledger.codes import INVALID_ENTRY_ID
from ledger.drivers.batch_reads import can_batch, read_batched
from ledger.drivers.context import LedgerContext
from ledger.drivers.handle_errors import raise_bugs
from ledger.drivers.metadata_store import VersionedMetadata
from ledger.drivers.requests import LedgerRequests
from ledger.drivers.runner import MachineRunner
from ledger.errors import (
    EntryMissingError,
    EntryUnavailableError,
    LedgerHandleError,
    NoSuchLedgerError,
    NoSuchLedgerMetadataError,
    ReadBeyondLacError,
)
from ledger.machines.read_lac_state import (
    CompleteReadLac,
    FailReadLac,
    LacAction,
    LacReplied,
    ReadLacState,
    SendReadLac,
)
from ledger.machines.read_state import (
    CompleteRead,
    EntryReadState,
    FailRead,
    ReadAction,
    ReadFailure,
    SendRead,
)
from ledger.machines.signals import RecordHealth

log = logging.getLogger(__name__)

READS_IN_FLIGHT_MAX = 64  # entries read concurrently by read_entries
EMPTY_LEDGER_POLL_S = 0.1  # pause of a long poll on a ledger no bookie has seen yet
# A tailing reader whose long polls bring nothing reads the metadata again, and asks the rest
# of the write set for their LACs, QUIET_CHECK_S_MIN after the last entry came, then at
# intervals doubling up to QUIET_CHECK_S_MAX while nothing comes: the bound on how long an
# ensemble change it was not told of, or a bookie that missed entries, can stall it. At a fixed
# second, an idle stream's reader cost a ZooKeeper read and three bookie requests a second for
# as long as it followed (a read proxy's read-aheads of 150 idle streams took 65 % of its core).
QUIET_CHECK_S_MIN = 1.0
QUIET_CHECK_S_MAX = 5.0
LAC_ELSEWHERE_S = 1.0  # how long asking the rest of the write set for their LACs waits


class LedgerReader:
    """Reads one ledger (open or closed). Use `await client.open(...)` to get one."""

    def __init__(
        self,
        context: LedgerContext,
        versioned: VersionedMetadata,
        known: Mapping[int, bytes] | None = None,
    ) -> None:
        """`known`: entries already read (by the recovery that closed the ledger), served
        from memory by `read_entry` while within the LAC."""
        self.ledger_id = versioned.ledger_id
        self._known = dict(known or {})
        self._context = context
        self._versioned = versioned
        metadata = versioned.metadata
        self._codec = EntryCodec(self.ledger_id, metadata.digest_type, metadata.password)
        self._requests = LedgerRequests(context.bookies, self.ledger_id, self._codec)
        closed = metadata.state is LedgerState.CLOSED
        self.lac = metadata.last_entry_id if closed else INVALID_ENTRY_ID
        self._refreshed_at_s = context.clock()
        self._lac_asked_at_s = float("-inf")  # when the write set was last asked for its LAC
        self._polled_lacs: dict[str, int] = {}  # each bookie's LAC as its last long poll gave it
        self._quiet_every_s = QUIET_CHECK_S_MIN  # between those checks while nothing comes

    @property
    def metadata(self) -> LedgerMetadata:
        return self._versioned.metadata

    @property
    def metadata_version(self) -> int:
        return self._versioned.version

    async def refresh(self, synced: bool = True) -> bool:
        """Reads the ledger's metadata again; whether it changed (new ensembles, or closed
        since). A ledger whose metadata is gone (deleted) keeps what the reader had: its
        reads fail as they would have, and the caller learns of the deletion its own way.
        `synced=False` reads what the region's ZooKeeper server has seen, without the round
        trip to the leader (a periodic check, which the next one completes)."""
        self._refreshed_at_s = self._context.clock()
        try:
            versioned = await self._context.metadata.read(self.ledger_id, synced=synced)
        except NoSuchLedgerMetadataError:
            return False
        if versioned.version <= self._versioned.version:
            return False
        self._versioned = versioned
        if versioned.metadata.state is LedgerState.CLOSED:
            self.lac = max(self.lac, versioned.metadata.last_entry_id)
        return True

    @property
    def is_closed(self) -> bool:
        return self.metadata.state is LedgerState.CLOSED

    # ---------------------------------------------------------------------------- LAC

    async def read_lac(self) -> int:
        """Asks the last ensemble for the LAC (quorum coverage); returns the best known LAC."""
        if self.is_closed:
            return self.lac
        metadata = self.metadata
        state = ReadLacState(
            metadata.current_ensemble,
            metadata.write_quorum,
            metadata.ack_quorum,
            now_s=self._context.clock(),
            timeout_s=self._context.config.read_timeout_s,
        )
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        runner: MachineRunner[LacAction] = MachineRunner(
            state, lambda a: self._on_lac(a, runner, done)
        )
        runner.pump()
        try:
            lac = await done
        finally:
            await runner.close()
        self.lac = max(self.lac, lac)
        return self.lac

    def _on_lac(
        self, action: LacAction, runner: MachineRunner[LacAction], done: asyncio.Future[int]
    ) -> None:
        match action:
            case SendReadLac():
                runner.spawn(self._read_last(action.bookie, runner))
            case CompleteReadLac():
                _settle(done, result=action.lac)
            case FailReadLac():
                _settle(
                    done, error=EntryUnavailableError(f"ledger {self.ledger_id}: {action.message}")
                )
            case RecordHealth():
                self._context.record_health(action)

    async def _read_last(self, bookie: str, runner: MachineRunner[LacAction]) -> None:
        reply = await self._requests.last(bookie)
        if isinstance(reply, LacReplied):  # its last entry's LAC: where its polls start
            self._polled_lacs[bookie] = max(self._polled_lacs.get(bookie, reply.lac), reply.lac)
        runner.feed(reply)

    async def read_explicit_lac(self) -> int:
        """The LAC the bookies hold (explicit LAC or their last entry's), any one will do."""
        if self.is_closed:
            return self.lac

        async def ask(bookie: str) -> int:
            response = await self._context.bookies.read_lac(bookie, self.ledger_id)
            best = INVALID_ENTRY_ID
            if response.lac_body:
                best = self._codec.decode_lac(response.lac_body)
            if response.last_entry_body:
                best = max(best, self._codec.decode_last_entry(response.last_entry_body).lac)
            return best

        # Each bookie's outcome counts on its own (any one answer will do), but an error that
        # is not a bookie's (a bug) is raised, not counted as one bookie not answering.
        answers = await asyncio.gather(
            *(ask(b) for b in self.metadata.current_ensemble), return_exceptions=True
        )
        raise_bugs(answers)
        lacs = [a for a in answers if isinstance(a, int)]
        if not lacs:
            raise EntryUnavailableError(f"ledger {self.ledger_id}: no bookie returned its LAC")
        self.lac = max(self.lac, *lacs)
        return self.lac

    # ------------------------------------------------------------------------ entries

    async def read_entry(self, entry_id: int, *, allow_unconfirmed: bool = False) -> bytes:
        """One entry's payload; refuses entries past the LAC unless `allow_unconfirmed`.
        When no bookie of its write set has it or answers, tries once more if the metadata
        changed meanwhile (its copies moved)."""
        if entry_id < 0:
            raise LedgerHandleError(f"ledger {self.ledger_id}: entry id {entry_id} is negative")
        if entry_id > self.lac and not allow_unconfirmed:
            raise ReadBeyondLacError(
                f"ledger {self.ledger_id}: entry {entry_id} is beyond the LAC {self.lac}"
            )
        known = self._known.get(entry_id)
        if known is not None and entry_id <= self.lac:
            return known
        try:
            return await self._read_entry_once(entry_id)
        except (EntryMissingError, EntryUnavailableError):
            if not await self._refresh_quietly():
                raise
        return await self._read_entry_once(entry_id)

    async def _read_entry_once(self, entry_id: int) -> bytes:
        write_set = self.metadata.write_set(entry_id)
        now_s = self._context.clock()
        order = self._context.read_order(write_set, now_s)
        delays = self._context.placement.speculative_delays(order, now_s)
        state = EntryReadState(
            entry_id,
            order,
            now_s=now_s,
            delays_s=delays[: len(order) - 1],
            timeout_s=self._context.config.read_timeout_s,
        )
        bodies: dict[str, bytes] = {}
        done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        runner: MachineRunner[ReadAction] = MachineRunner(
            state, lambda a: self._on_read(a, runner, bodies, done)
        )
        runner.pump()
        metrics = self._context.metrics
        try:
            payload = await done
        except LedgerHandleError as err:
            metrics.read_failures.add(1, {"code": err.code})
            raise
        finally:
            await runner.close()
        metrics.read_latency.record(self._context.clock() - now_s)
        return payload

    def _on_read(
        self,
        action: ReadAction,
        runner: MachineRunner[ReadAction],
        bodies: dict[str, bytes],
        done: asyncio.Future[bytes],
    ) -> None:
        match action:
            case SendRead():
                runner.spawn(self._read_one(action, runner, bodies))
            case CompleteRead():
                _settle(done, result=bodies[action.bookie])
            case FailRead():
                kind = (
                    EntryMissingError
                    if action.reason is ReadFailure.MISSING
                    else EntryUnavailableError
                )
                _settle(done, error=kind(f"ledger {self.ledger_id}: {action.message}"))
            case RecordHealth():
                self._context.record_health(action)

    async def _read_one(
        self, action: SendRead, runner: MachineRunner[ReadAction], bodies: dict[str, bytes]
    ) -> None:
        read = await self._requests.read(action)
        if read.max_lac is not None:
            self.lac = max(self.lac, read.max_lac)
        if read.payload is not None:
            bodies[action.bookie] = read.payload
        runner.feed(read.event)

    async def read_entries(self, first: int, last: int) -> list[bytes]:
        """Payloads of entries first..last (inclusive), in order: with batched reads where one
        bookie holds them all (`ledger.drivers.batch_reads`), else entry by entry, concurrently."""
        if last > self.lac:
            raise ReadBeyondLacError(
                f"ledger {self.ledger_id}: entries {first}..{last} reach beyond the LAC {self.lac}"
            )
        if first < 0:
            raise LedgerHandleError(f"ledger {self.ledger_id}: entry id {first} is negative")
        if first > last:
            return []
        if last > first and can_batch(self.metadata) and self._context.config.batch_reads:
            try:
                return await self._read_batched(first, last)
            except (EntryMissingError, EntryUnavailableError):
                if not await self._refresh_quietly():
                    raise
            return await self._read_batched(first, last)
        return await self._read_singly(first, last)

    async def _read_batched(self, first: int, last: int) -> list[bytes]:
        return await read_batched(
            self._context,
            self.ledger_id,
            self.metadata,
            self._codec,
            first,
            last,
            self._read_singly,
        )

    async def _read_singly(self, first: int, last: int) -> list[bytes]:
        """Entries first..last, each its own speculative read, many in flight."""
        slots = asyncio.Semaphore(READS_IN_FLIGHT_MAX)

        async def one(entry_id: int) -> bytes:
            async with slots:
                return await self.read_entry(entry_id)

        return list(await asyncio.gather(*(one(e) for e in range(first, last + 1))))

    async def wait_for_entry(self, timeout_ms: int | None = None) -> tuple[int, bytes] | None:
        """The entry after the LAC once it is confirmed (long poll); None on timeout or end."""
        if self.is_closed:
            return None
        timeout_ms = timeout_ms or self._context.config.long_poll_timeout_ms
        deadline_s = self._context.clock() + timeout_ms / 1000
        while True:
            remaining_ms = int((deadline_s - self._context.clock()) * 1000)
            outcome = await self._long_poll(max(remaining_ms, 1))
            if outcome is None or outcome == "empty":
                await self._refresh_while_waiting()
            else:
                self._quiet_every_s = QUIET_CHECK_S_MIN
            if outcome != "empty":
                return outcome
            if remaining_ms <= 0:
                return None
            # Nothing to wait on (no entry reached these bookies yet, or the last ensemble
            # has not seen LAC+1 confirmed): poll again shortly instead of returning at once
            # (a tailing caller would spin).
            await asyncio.sleep(min(remaining_ms / 1000, EMPTY_LEDGER_POLL_S))

    async def _refresh_while_waiting(self) -> None:
        """A long poll that brought nothing: the metadata again, if not read lately (an
        ensemble change since it was read leaves the poll asking a bookie that no longer
        gets the ledger's entries). Less and less often while nothing comes."""
        if self._context.clock() - self._refreshed_at_s >= self._quiet_every_s:
            await self._refresh_quietly(synced=False)
            self._quiet_every_s = min(QUIET_CHECK_S_MAX, self._quiet_every_s * 2)

    async def _refresh_quietly(self, synced: bool = True) -> bool:
        """`refresh()` for the reader's own use: metadata it cannot read now (ZooKeeper
        away) changes nothing, and the read or poll goes on as it would have."""
        try:
            return await self.refresh(synced)
        except GlobelogError as err:
            log.debug("ledger %d: metadata not read again: %s", self.ledger_id, err)
            return False

    async def _long_poll(self, timeout_ms: int) -> tuple[int, bytes] | Literal["empty"] | None:
        """One long poll over the write set of LAC+1; "empty" when there is nothing to wait on
        (no bookie knows the ledger, or the last ensemble has not seen LAC+1 confirmed)."""
        entry_id = self.lac + 1
        if entry_id < self.metadata.ensembles[-1].first_entry_id:
            # Entry LAC+1 was written before the last ensemble change: a bookie of its write
            # set may have missed it (acknowledged without it) and been replaced since, so it
            # never learns a newer LAC, and a long poll there would wait in vain for ever.
            # The last ensemble knows where the ledger stands.
            if await self.read_lac() < entry_id:
                return "empty"  # nothing to wait on: asked again shortly, not at once
            return entry_id, await self.read_entry(entry_id)
        order = self._context.read_order(self.metadata.write_set(entry_id), self._context.clock())
        empty = False
        for bookie in order:
            try:
                response, asked = await self._poll_at(bookie, timeout_ms)
            except NoSuchLedgerError:
                empty = True
                continue
            except GlobelogError:
                self._context.placement.record_failure(bookie, self._context.clock())
                continue
            if response.max_lac is not None:
                self.lac = max(self.lac, response.max_lac)
            if self.lac < entry_id:
                # Nothing came here. A bookie that missed entries (down while the others
                # acknowledged them) knows an old LAC, and while the writer is idle no entry
                # comes to tell it a newer one: ask the rest of the write set.
                await self._lac_elsewhere([b for b in order if b != bookie])
                if self.lac < entry_id:
                    return None
                return entry_id, await self.read_entry(entry_id)
            if response.body and asked + 1 == entry_id:  # the body is entry asked + 1
                try:
                    return entry_id, self._codec.decode_entry(response.body, entry_id).payload
                except GlobelogError:
                    self._context.placement.record_failure(bookie, self._context.clock())
            return entry_id, await self.read_entry(entry_id)
        if empty:
            return "empty"
        raise EntryUnavailableError(f"ledger {self.ledger_id}: no bookie answered the long poll")

    async def _poll_at(self, bookie: str, timeout_ms: int) -> tuple[ReadResponse, int]:
        """One bookie's long poll, and the LAC it was asked from (its body is the entry after).

        A bookie wakes the long polls waiting on a ledger each time its LAC moves, and only
        once: a poll that the move does not pass stays unanswered until its timeout, however
        far the LAC moves after (BookKeeper's one-shot notification). A poll asked from the
        reader's LAC at a bookie a step behind it (the reader learnt that LAC from a faster
        bookie) is spent by the move that brings the bookie level, and then waits out its
        timeout while entries come: a tailing reader's record a whole poll late. So a poll
        asks from the LAC this bookie last gave (in a poll's answer or its last entry; one
        below the reader's for a bookie not heard from), and an answer that only brings the
        bookie level with the reader is asked again at once, from there: each such answer
        raises the bookie's LAC, so at most the gap's worth."""
        deadline_s = self._context.clock() + timeout_ms / 1000
        while True:
            known = self._polled_lacs.get(bookie, max(INVALID_ENTRY_ID, self.lac - 1))
            asked = min(self.lac, known)
            remaining_ms = max(1, int((deadline_s - self._context.clock()) * 1000))
            response = await self._context.bookies.read_lac_long_poll(
                bookie, self.ledger_id, asked, min(timeout_ms, remaining_ms)
            )
            answered = response.max_lac
            if answered is None:
                return response, asked
            self._polled_lacs[bookie] = answered
            level_only = asked < answered <= self.lac
            if not level_only or self._context.clock() >= deadline_s:
                return response, asked

    async def _lac_elsewhere(self, bookies: list[str]) -> None:
        """Raises the LAC to the highest the last entries of `bookies` carry, from those that
        answer within LAC_ELSEWHERE_S; at most as often as the metadata is read again while
        nothing comes (an idle stream's polls come back empty several times a second). A bookie that does not
        answer, or answers with an error, counts as failed for the read order."""
        now_s = self._context.clock()
        if not bookies or now_s - self._lac_asked_at_s < self._quiet_every_s:
            return
        self._lac_asked_at_s = now_s

        async def ask(bookie: str) -> int:
            response = await self._context.bookies.read_last_entry(bookie, self.ledger_id)
            return self._codec.decode_last_entry(response.body or b"").lac

        asked = {asyncio.ensure_future(ask(b)): b for b in bookies}
        try:
            done, _ = await asyncio.wait(asked, timeout=LAC_ELSEWHERE_S)
        finally:  # a cancelled caller (a page ends, a tail stops) leaves no request behind
            for task in asked:
                task.cancel()
            await asyncio.gather(*asked, return_exceptions=True)
        answers = [t.exception() if t in done and not t.cancelled() else None for t in asked]
        raise_bugs([a for a in answers if a is not None])
        for task, bookie in asked.items():
            if task in done and not task.cancelled() and task.exception() is None:
                self.lac = max(self.lac, task.result())
            else:
                self._context.placement.record_failure(bookie, self._context.clock())


def _settle(
    future: asyncio.Future[object] | asyncio.Future[int] | asyncio.Future[bytes],
    *,
    result: object = None,
    error: BaseException | None = None,
) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]
