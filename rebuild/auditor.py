"""The auditor: one live per cluster, it finds what needs rebuilding and marks it.

**Election.** Every rebuilder is a candidate: it creates an ephemeral sequential vote under
`…/underreplication/auditorelection` and the lowest vote audits; the others wait on the
votes' children watch and take over when the auditor's session ends (its vote vanishes with
it). The auditor writes its name into the election node, as BookKeeper's does, so both
systems' tools can say who audits.

**What it marks.**
- A bookie of the published topology that has been missing from the registry
  (`/ledgers/available`, read-only ones included: they still serve their copies) for
  `lost_bookie_delay_s`, or that an operator decommissions (at once): every ledger with a
  fragment on it is marked with that bookie.
- Every `check_interval_s`, a full check of every ledger: a member that is lost, unknown to
  the topology or decommissioned is marked; so is a member that answers it lacks the first or
  last entry it should hold of a fragment (a disk replaced under the same bookie id, which
  the registry cannot show); and so is an ensemble that breaks the durability
  rule (I6), with the member whose region holds the most copies of it, the one whose move
  spreads the ensemble the most (BookKeeper's region-aware policy cannot see these: its
  adherence check always answers "meets strict").

An operator (or the failover run, before its final audit) asks for a full check at once by
creating `/globelog/rebuild-check`; the auditor deletes it when the check is done.

Marking is idempotent (a marker only grows), so an auditor that takes over repeats a
predecessor's audit harmlessly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from core import errors, runtime
from core.settings.rebuild_settings import CHECK_NOW_ZNODE, DECOMMISSION_ZNODE, RebuildSettings
from core.topology import Replication
from global_meta import ANY_VERSION, MetaSession
from global_meta.followers import run_together
from ledger import (
    Layout,
    LedgerClient,
    LedgerMetadata,
    UnderReplication,
    VersionedMetadata,
    encode_vote,
)
from placement import Adherence, LocatedBookie, audit_ensemble

log = logging.getLogger(__name__)

AVAILABLE = "/ledgers/available"
VOTE_PREFIX = "V_"
TICK_S = 1.0  # how often the auditor looks at how long each bookie has been missing


@dataclass(slots=True)
class AuditCounts:
    """What the auditor has done since it was elected, for its status."""

    audits: int = 0
    full_checks: int = 0
    ledgers_marked: int = 0
    last_full_check_s: float | None = None
    lost: dict[str, float] = field(default_factory=dict)  # bookie -> missing since (clock)


class Auditor:
    def __init__(
        self,
        store: MetaSession,
        client: LedgerClient,
        settings: RebuildSettings,
        name: str,
        clock: Callable[[], float] | None = None,
        layout: Layout | None = None,
    ) -> None:
        self._store = store
        self._client = client
        self._under = UnderReplication(store, layout)
        self._layout: Layout = self._under.layout
        self._settings = settings
        self.name = name
        self._clock = clock or asyncio.get_running_loop().time
        self.clock = self._clock  # the clock of `counts.lost`
        self.leading = False
        self.counts = AuditCounts()
        self._missing_since: dict[str, float] = {}
        self._audited: set[str] = set()  # lost bookies whose ledgers are marked
        self._lost: set[str] = set()  # as the last tick found them

    # ------------------------------------------------------------------------ election

    async def run(self, following: Callable[[], None]) -> None:
        """Stands for election and audits while elected; a Follower's loop (a lost session
        ends it with an error, and the restart votes again)."""
        await self._under.ensure_layout()
        await self._drop_orphan_votes()
        vote = await self._store.create(
            f"{self._layout.election}/{VOTE_PREFIX}",
            encode_vote(self.name),
            ephemeral=True,
            sequential=True,
            make_parents=True,
        )
        following()
        try:
            await self._wait_for_turn(vote)
            self.leading = True
            log.info("%s audits (vote %s)", self.name, vote)
            await self._store.set(
                self._layout.election, encode_vote(self.name), version=ANY_VERSION
            )
            await self._lead(vote)
        finally:
            self.leading = False
            with contextlib.suppress(errors.GlobelogError):
                await self._store.delete(vote, version=ANY_VERSION)

    async def _drop_orphan_votes(self) -> None:
        """Deletes this session's votes left by an earlier run: a vote whose create went
        through while its answer was lost with the connection stays as long as the session,
        and, lower than the new vote, held every candidate's turn (no auditor for minutes in
        a failover run with partitions) until the session ended."""
        session = self._store.session_id
        if session is None:
            return
        try:
            names = await self._store.children(self._layout.election)
        except errors.NoNodeError:
            return  # no election yet: the first vote makes it
        for name in names:
            if not name.startswith(VOTE_PREFIX):
                continue
            path = f"{self._layout.election}/{name}"
            stat = await self._store.exists(path)
            if stat is not None and stat.ephemeral_owner == session:
                log.warning("%s: dropping its orphaned vote %s", self.name, path)
                with contextlib.suppress(errors.NoNodeError):
                    await self._store.delete(path, version=stat.version)

    async def _wait_for_turn(self, vote: str) -> None:
        mine = vote.rsplit("/", 1)[1]
        async with contextlib.aclosing(self._store.watch_children(self._layout.election)) as votes:
            async for names in votes:
                ours = sorted(n for n in names if n.startswith(VOTE_PREFIX))
                if mine not in ours:
                    raise errors.SessionExpiredError(f"{self.name}: vote {vote} is gone")
                if ours[0] == mine:
                    return

    async def _lead(self, vote: str) -> None:
        """Two loops while elected: lost bookies every tick, and full checks; a full check
        (minutes on a large cluster) never holds up the marking of a lost bookie."""
        self._missing_since.clear()
        self._audited.clear()
        self._lost = set()
        await run_together(self._follow_losses(vote), self._follow_checks())

    async def _follow_losses(self, vote: str) -> None:
        while True:
            if await self._store.exists(vote) is None:
                raise errors.SessionExpiredError(f"{self.name}: vote {vote} is gone")
            lost = await self._lost_bookies()
            fresh = lost - self._audited
            if fresh:
                await self.audit_bookies(fresh)
                self._audited |= fresh
            self._audited &= lost  # one that came back is audited again if lost again
            self._lost = lost
            await asyncio.sleep(TICK_S)

    async def _follow_checks(self) -> None:
        # A new auditor checks everything first, unless another auditor did within the
        # interval (its end is recorded where BookKeeper's auditor records its own).
        next_full = self._clock()
        last_ms = await self._under.last_full_check_ms()
        if last_ms is not None:
            since_s = max(0.0, runtime.wall_s() - last_ms / 1000)
            next_full += max(0.0, self._settings.check_interval_s - since_s)
        while True:
            asked = await self._store.exists(CHECK_NOW_ZNODE)
            if self._clock() >= next_full or asked is not None:
                await self.full_check(set(self._lost))
                next_full = self._clock() + self._settings.check_interval_s
                if asked is not None:  # done: whoever asked waits for its deletion
                    with contextlib.suppress(errors.NoNodeError, errors.BadVersionError):
                        await self._store.delete(CHECK_NOW_ZNODE, version=asked.version)
            await asyncio.sleep(TICK_S)

    # ---------------------------------------------------------------------- the audits

    async def _lost_bookies(self) -> set[str]:
        """Published bookies missing for the delay, and decommissioned ones at once."""
        now = self._clock()
        registered = set(await self._store.children(AVAILABLE))
        if "readonly" in registered:
            registered |= set(await self._store.children(f"{AVAILABLE}/readonly"))
        known = {b.bookie_id for b in self._client.published.bookies}
        for bookie in known - registered:
            self._missing_since.setdefault(bookie, now)
        for bookie in registered | (set(self._missing_since) - known):
            self._missing_since.pop(bookie, None)
        lost = {
            b
            for b, since in self._missing_since.items()
            if now - since >= self._settings.lost_bookie_delay_s
        }
        self.counts.lost = {b: self._missing_since[b] for b in lost}
        return lost | await self.decommissioned()

    async def decommissioned(self) -> set[str]:
        try:
            return set(await self._store.children(DECOMMISSION_ZNODE))
        except errors.NoNodeError:
            return set()

    async def audit_bookies(self, lost: set[str]) -> int:
        """Marks every ledger with a fragment on a bookie of `lost`; how many were marked."""
        log.warning("auditing lost bookies %s", sorted(lost))

        async def mark(versioned: VersionedMetadata) -> bool:
            members = {b for e in versioned.metadata.ensembles for b in e.bookies}
            on_lost = tuple(sorted(members & lost))
            return bool(on_lost) and await self._under.mark(versioned.ledger_id, on_lost)

        marked = sum((await self._client.visit_ledgers(mark)).values())
        self.counts.audits += 1
        self.counts.ledgers_marked += marked
        log.warning("marked %d ledgers with copies on %s", marked, sorted(lost))
        return marked

    async def full_check(self, lost: set[str]) -> int:
        """Marks every ledger with a copy on a lost, unknown or decommissioned bookie, or an
        ensemble that breaks the durability rule; how many were marked."""
        located = {
            b.bookie_id: LocatedBookie(b.bookie_id, b.region, b.rack)
            for b in self._client.published.bookies
        }

        async def check(versioned: VersionedMetadata) -> bool:
            metadata = versioned.metadata
            replicas = to_rebuild(metadata, lost, located, self._client.replication_of)
            gaps = await self._client.replica_gaps(versioned.ledger_id, versioned)
            replicas += tuple(g.fragment.bookie_id for g in gaps if g.missing)
            return bool(replicas) and await self._under.mark(versioned.ledger_id, replicas)

        marked = sum((await self._client.visit_ledgers(check)).values())
        await self._under.full_check_ended(round(runtime.wall_s() * 1000))
        self.counts.full_checks += 1
        self.counts.ledgers_marked += marked
        self.counts.last_full_check_s = self._clock()
        if marked:
            log.warning("full check marked %d ledgers", marked)
        return marked


def to_rebuild(
    metadata: LedgerMetadata,
    lost: set[str],
    located: dict[str, LocatedBookie],
    replication_of: Callable[[LedgerMetadata], Replication],
) -> tuple[str, ...]:
    """The members of the ledger's ensembles to re-make elsewhere: lost or unknown ones, and
    for an ensemble that breaks the rule with every member present, the member in the region
    holding the most of its copies."""
    replication = replication_of(metadata)
    found: dict[str, None] = {}
    locations = list(located.values())
    for ensemble in metadata.ensembles:
        gone = [b for b in ensemble.bookies if b in lost or b not in located]
        found.update(dict.fromkeys(gone))
        if gone:
            continue  # re-placing the lost member is checked against the rule by placement
        report = audit_ensemble(
            ensemble.bookies,
            locations,
            replication.write_quorum,
            replication.ack_quorum,
            replication.min_regions_for_durability,
        )
        if report.adherence is Adherence.FAIL:
            regions = Counter(located[b].region for b in ensemble.bookies)
            crowded = max(regions, key=lambda r: (regions[r], r))
            mover = [b for b in ensemble.bookies if located[b].region == crowded][-1]
            found[mover] = None
    return tuple(found)
