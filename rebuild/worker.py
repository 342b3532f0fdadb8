"""A rebuild worker: claims marked ledgers and re-makes their copies, many at once.

Every region runs one (`globelog serve rebuilder`), so every region's bookies are donors and
recipients at once: each worker claims ledgers at random among those marked, reads each entry
from the copy nearest to it and writes it where placement says (ledger.drivers.rebuild). Its
`ledgers_at_once` slots share one byte rate (rebuild.pacing), which yields to the foreground
unless it is set fixed.

A ledger's open last ensemble is its writer's: while its stream has an owner (the lock held)
the fragment is deferred. A stream without one (its owner died, and nobody writes it again)
would keep a lost copy forever, so its ledger is closed (a recovery, as the next owner's
would be) and its last fragment copied too.

A ledger ends in one of three ways:
- rebuilt (or deleted meanwhile): its marker is deleted at the version claimed, so a marker
  that grew during the copy (another bookie lost) stays and is claimed again;
- its open last ensemble is its writer's (deferred) or a step failed (no replacement, no
  readable copy, a bookie or ZooKeeper that did not answer): the claim is released and the
  ledger left for `retry_after_s`, by this worker; another may take it sooner;
- the worker dies: its claims end with its ZooKeeper session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from core.errors import GlobelogError, InvalidStreamNameError, NoNodeError
from core.settings.rebuild_settings import RebuildSettings
from core.streams import LEDGER_NAMESPACE_KEY, LEDGER_STREAM_KEY
from global_meta import MetaSession
from global_meta.followers import run_together
from global_meta.streams import StreamMetaStore
from ledger import (
    Claim,
    LedgerClient,
    LedgerRebuild,
    LedgerState,
    NoSuchLedgerMetadataError,
    UnderReplication,
)
from rebuild.pacing import Pacer, pacer_of

log = logging.getLogger(__name__)

FAILURES_KEPT = 20  # the last failures a worker shows in its status
# A ledger that keeps failing (every copy of an entry lost, no bookie to place a copy on)
# waits longer each time: retry_after_s, doubled per failure in a row, at most this.
RETRY_AFTER_MAX_S = 600.0
FAILED_KEPT_MAX = 10_000  # failure counts kept (I10); past it, only those still resting


@dataclass(slots=True)
class WorkerCounts:
    ledgers_rebuilt: int = 0
    fragments_rebuilt: int = 0
    entries_copied: int = 0
    bytes_copied: int = 0
    ledgers_deferred: int = 0
    ledgers_closed: int = 0  # open ledgers of streams without an owner, closed to be rebuilt
    ledgers_failed: int = 0
    in_progress: set[int] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)


class Worker:
    def __init__(
        self,
        store: MetaSession,
        client: LedgerClient,
        settings: RebuildSettings,
        name: str,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._under = UnderReplication(store)
        self._store = store
        self._client = client
        self._settings = settings
        self.name = name
        self._clock = clock or asyncio.get_running_loop().time
        self.pacer: Pacer = pacer_of(
            settings.rate_bytes_s, settings.rate_min_bytes_s, settings.yield_delay_s, self._clock
        )
        self._resting: dict[int, float] = {}  # ledger -> not claimed again before
        self._failed: dict[int, int] = {}  # ledger -> failures in a row (marked ledgers only)
        self.counts = WorkerCounts()

    async def run(self, following: Callable[[], None]) -> None:
        """The worker's slots, each claiming and rebuilding ledgers; a Follower's loop."""
        await self._under.ensure_layout()
        following()
        await run_together(*(self._slot() for _ in range(self._settings.ledgers_at_once)))

    async def _slot(self) -> None:
        while True:
            claim = None
            if not await self._under.disabled():
                claim = await self._under.claim_any(self.name, skip=self._skipped())
            if claim is None:
                await asyncio.sleep(self._settings.poll_interval_s)
                continue
            try:
                await self.rebuild(claim)
            except BaseException:
                await asyncio.shield(self._release_quietly(claim))
                raise

    def _skipped(self) -> frozenset[int]:
        now = self._clock()
        for ledger_id in [i for i, until in self._resting.items() if until <= now]:
            del self._resting[ledger_id]
        if len(self._failed) > FAILED_KEPT_MAX:  # ledgers done by others, or deleted
            self._failed = {i: n for i, n in self._failed.items() if i in self._resting}
        return frozenset(self._resting) | frozenset(self.counts.in_progress)

    async def claim(self, ledger_id: int) -> Claim | None:
        """This worker's claim on one marked ledger (its ZooKeeper session holds it)."""
        return await self._under.claim(ledger_id, self.name)

    async def rebuild(self, claim: Claim) -> bool:
        """One claimed ledger, to its end; True when its marker is done."""
        ledger_id = claim.ledger_id
        self.counts.in_progress.add(ledger_id)
        try:
            report = await self._client.rebuild(ledger_id, claim.marker.replicas, self.pacer)
            self._count(report)
            if not report.complete and await self._closed_if_ownerless(ledger_id, claim):
                report = await self._client.rebuild(ledger_id, claim.marker.replicas, self.pacer)
                self._count(report)
        except GlobelogError as err:
            self._fail(ledger_id, f"ledger {ledger_id}: {err.code}: {err}")
            await self._under.release(claim)
            return False
        finally:
            self.counts.in_progress.discard(ledger_id)
        if not report.complete:
            self.counts.ledgers_deferred += 1
            self._resting[ledger_id] = self._clock() + self._settings.retry_after_s
            await self._under.release(claim)
            return False
        done = await self._under.done(claim)
        self._failed.pop(ledger_id, None)
        if done:
            self.counts.ledgers_rebuilt += 1
        return done

    def _count(self, report: LedgerRebuild) -> None:
        self.counts.fragments_rebuilt += len(report.rebuilt)
        self.counts.entries_copied += report.entries
        self.counts.bytes_copied += report.bytes

    async def _closed_if_ownerless(self, ledger_id: int, claim: Claim) -> bool:
        """After a pass that left the ledger's open last ensemble to its writer: whether a
        second pass may copy it, the ledger being closed now. It is closed here (a recovery,
        which fences it, as the next owner's would) when it is a segment's whose stream has no
        owner, or is gone: nobody writes it then, and nobody would move its open ensemble off
        a lost bookie. Ledgers that do not name their namespace (made before it was recorded)
        or name an invalid one count as owned. A ledger deleted meanwhile ends its pass."""
        try:
            metadata = (await self._client.metadata(ledger_id)).metadata
        except NoSuchLedgerMetadataError:
            return True  # the next pass finds it gone
        if metadata.state is not LedgerState.OPEN:
            return True  # closed meanwhile (its owner released it, or another rebuilder)
        custom = dict(metadata.custom_metadata)
        namespace, stream = custom.get(LEDGER_NAMESPACE_KEY), custom.get(LEDGER_STREAM_KEY)
        if namespace is None or stream is None:
            return False
        try:
            streams = StreamMetaStore(self._store, namespace.decode(errors="replace"))
            name = stream.decode(errors="replace")
            path = streams.path(name)
        except InvalidStreamNameError:
            return False
        with contextlib.suppress(NoNodeError):  # (a stream deleted: no owner either)
            await self._store.sync(path)  # an owner whose lock our server has not seen yet
        if await streams.holder(name) is not None:
            return False
        try:
            await self._client.open(ledger_id, metadata.password, recover_ledger=True)
        except NoSuchLedgerMetadataError:
            return True
        self.counts.ledgers_closed += 1
        log.warning("ledger %d: closed, its stream %s/%s having no owner to move its open "
                    "ensemble off %s", ledger_id, streams.namespace, name,
                    ", ".join(sorted(claim.marker.replicas)))  # fmt: skip
        return True

    def _fail(self, ledger_id: int, why: str) -> None:
        failures = self._failed[ledger_id] = self._failed.get(ledger_id, 0) + 1
        wait_s = min(self._settings.retry_after_s * 2 ** (failures - 1), RETRY_AFTER_MAX_S)
        log.warning("rebuild of ledger %d failed (%d in a row), retried in %.0f s: %s",
                    ledger_id, failures, wait_s, why)  # fmt: skip
        self.counts.ledgers_failed += 1
        self.counts.failures = [*self.counts.failures, why][-FAILURES_KEPT:]
        self._resting[ledger_id] = self._clock() + wait_s

    async def _release_quietly(self, claim: Claim) -> None:
        try:
            await self._under.release(claim)
        except GlobelogError as err:  # the session's end releases it anyway
            log.warning("could not release the claim on ledger %d: %s", claim.ledger_id, err)
