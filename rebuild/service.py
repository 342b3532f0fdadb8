"""The rebuilder role: an auditor candidate, a worker and its published status, each a
supervised loop (global_meta.followers) over one ZooKeeper session and one ledger client.

Its status is an ephemeral znode, `/globelog/rebuilders/<name>` (JSON, rewritten every
`report_interval_s`): `globelog rebuild status` reads every rebuilder's there, and the
local cluster waits on it at start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import Callable
from typing import Any

from core import errors, runtime
from core.settings.rebuild_settings import REBUILDERS_ZNODE, RebuildSettings
from global_meta import ANY_VERSION, MetaSession
from global_meta.followers import Follower
from ledger import LedgerClient, UnderReplication, VersionedMetadata, pending_copies
from rebuild.auditor import Auditor
from rebuild.worker import Worker

log = logging.getLogger(__name__)

RATE_WINDOW_S = 30.0  # the copy rate a rebuilder reports is over this much recent time
# The auditor sizes what is under-replicated (a metadata read per marked ledger) this often,
# not at every status report.
SIZE_EVERY_S = 15.0
# A rebuilder's status counts for the shared pace while it is this recent: this many of its
# report intervals, and some slack for the clocks of other hosts.
STALE_REPORTS = 3
STALE_SLACK_S = 2.0


class RecoveryTimer:
    """A loss's time to full durability, as the auditor's counts show it: from the first
    bookie lost since the last recovery ended (or the first mark, when none is known) until
    nothing is marked. All times are on the auditor's clock."""

    def __init__(self) -> None:
        self.last_s: float | None = None  # the last recovery that ended, in seconds
        self._short_since: float | None = None
        self._marks_seen = 0  # the auditor's ledgers_marked at the last count
        self._ended_at = -math.inf

    def count(self, marked: int, marks_total: int, lost: dict[str, float], now: float) -> None:
        """One count: `marked` ledgers marked now, `marks_total` marked by the auditor so far,
        `lost` = bookie -> missing since. Ledgers marked since the last count were short too,
        even when every marker is gone already: a rebuild can take less than a count's
        interval."""
        newly_marked, self._marks_seen = marks_total != self._marks_seen, marks_total
        if (marked or newly_marked) and self._short_since is None:
            since = [s for s in lost.values() if s >= self._ended_at]
            self._short_since = min(since, default=now)
        if not marked and self._short_since is not None:
            self.last_s = round(now - self._short_since, 1)
            self._short_since = None
            self._ended_at = now


class Rebuilder:
    def __init__(
        self,
        store: MetaSession,
        client: LedgerClient,
        settings: RebuildSettings,
        name: str,
        region: str,
    ) -> None:
        self.name, self.region = name, region
        self._store = store
        self._settings = settings
        self.auditor = Auditor(store, client, settings, name)
        self.worker = Worker(store, client, settings, name)
        self._followers = [
            Follower(f"auditor candidate {name}", self.auditor.run),
            Follower(f"rebuild worker {name}", self.worker.run),
            Follower(f"rebuilder status {name}", self._report),
        ]
        self._started_s = runtime.wall_s()
        self._samples: list[tuple[float, int]] = []  # (clock, bytes copied) for the rate
        self._under = UnderReplication(store)
        self._client = client
        self.under_replicated: int | None = None  # marked ledgers, counted by the auditor
        self.under_replicated_bytes: int | None = None  # their copies' bytes, estimated
        self.recovery = RecoveryTimer()  # a loss's time to full durability
        self._sized_at: float | None = None
        self.last_status: dict[str, Any] | None = None  # as last published

    def start(self) -> None:
        for follower in self._followers:
            follower.start()

    async def stop(self) -> None:
        for follower in self._followers:
            await follower.stop()
        with contextlib.suppress(errors.GlobelogError):
            await self._store.delete(self.status_node, version=ANY_VERSION)

    @property
    def status_node(self) -> str:
        return f"{REBUILDERS_ZNODE}/{self.name}"

    def copy_rate(self, now: float | None = None) -> float:
        """Bytes copied per second over the samples of the last RATE_WINDOW_S (taken at each
        status report) and now."""
        now = runtime.monotonic() if now is None else now
        copied = self.worker.counts.bytes_copied
        recent = [(t, b) for t, b in self._samples if now - t <= RATE_WINDOW_S]
        if not recent or now <= recent[0][0]:
            return 0.0
        first_t, first_b = recent[0]
        return (copied - first_b) / (now - first_t)

    def status(self, now: float | None = None) -> dict[str, Any]:
        now = runtime.monotonic() if now is None else now
        counts = self.worker.counts
        self._samples = [(t, b) for t, b in self._samples if now - t <= RATE_WINDOW_S]
        self._samples.append((now, counts.bytes_copied))
        rate = self.copy_rate(now)
        audits = self.auditor.counts
        return {
            "name": self.name,
            "region": self.region,
            "started_at": self._started_s,
            "auditor": self.auditor.leading,
            "ledgers_rebuilt": counts.ledgers_rebuilt,
            "fragments_rebuilt": counts.fragments_rebuilt,
            "entries_copied": counts.entries_copied,
            "bytes_copied": counts.bytes_copied,
            "bytes_per_s": round(rate),
            "pace_bytes_s": round(self.worker.pacer.rate),
            "pace_shares": self.worker.pacer.shares,
            "ledgers_deferred": counts.ledgers_deferred,
            "ledgers_closed": counts.ledgers_closed,
            "ledgers_failed": counts.ledgers_failed,
            "in_progress": sorted(counts.in_progress),
            "failures": counts.failures[-5:],
            "lost_bookies": sorted(audits.lost) if self.auditor.leading else [],
            "under_replicated_ledgers": self.under_replicated if self.auditor.leading else None,
            "under_replicated_bytes": (
                self.under_replicated_bytes if self.auditor.leading else None
            ),
            "last_recovery_s": self.recovery.last_s,
            "followers": [f.status().describe(now) for f in self._followers],
        }

    async def _count_under_replicated(self) -> None:
        """The auditor's view of what is one copy short, and for how long it has been."""
        marked = await self._under.marked()
        self.under_replicated = len(marked)
        now = runtime.monotonic()
        counts = self.auditor.counts
        self.recovery.count(len(marked), counts.ledgers_marked, counts.lost, self.auditor.clock())
        if not marked:
            self.under_replicated_bytes = 0
        elif self._sized_at is None or now - self._sized_at >= SIZE_EVERY_S:
            self._sized_at = now

            async def size(versioned: VersionedMetadata) -> int:
                found = await self._under.read(versioned.ledger_id)
                if found is None:
                    return 0  # done meanwhile
                return pending_copies(versioned.metadata, found[0].replicas)["bytes"]

            sizes = await self._client.visit_ledgers(size, marked)
            self.under_replicated_bytes = sum(sizes.values())

    def health(self) -> dict[str, Any]:
        """The last published status with its followers' states as they are now (no sample
        of the rate is taken: a health check changes nothing)."""
        now = runtime.monotonic()
        followers = [f.status().describe(now) for f in self._followers]
        return {**(self.last_status or {"name": self.name, "region": self.region}),
                "followers": followers}  # fmt: skip

    async def _report(self, following: Callable[[], None]) -> None:
        """Keeps the status node current; created anew after a session's end. With a shared
        pace, also sets this rebuilder's share of it from the others' statuses."""
        while True:
            if self.auditor.leading:
                await self._count_under_replicated()
            if self._settings.shared_pace:
                self.worker.pacer.share(await self._copying_besides() + 1)
            self.last_status = self.status()
            data = json.dumps(self.last_status, sort_keys=True).encode()
            try:
                await self._store.set(self.status_node, data, version=ANY_VERSION)
            except errors.NoNodeError:
                await self._store.create(self.status_node, data, ephemeral=True, make_parents=True)
            following()
            await asyncio.sleep(self._settings.report_interval_s)

    async def _copying_besides(self) -> int:
        """How many other rebuilders were copying at their last status, of those whose last
        status is recent (one paused or cut off keeps its node until its session ends)."""
        fresh_ms = 1000 * (STALE_REPORTS * self._settings.report_interval_s + STALE_SLACK_S)
        now_ms = runtime.wall_ms()
        return sum(
            1
            for status in await read_rebuilders(self._store)
            if status.get("name") != self.name
            and status.get("in_progress")
            and now_ms - status["published_ms"] <= fresh_ms
        )


async def read_rebuilders(store: MetaSession) -> list[dict[str, Any]]:
    """Every live rebuilder's published status, with `published_ms`: when it last came."""
    try:
        names = await store.children(REBUILDERS_ZNODE)
    except errors.NoNodeError:
        return []
    found = []
    for name in names:
        try:
            data, stat = await store.get(f"{REBUILDERS_ZNODE}/{name}")
        except errors.NoNodeError:
            continue
        try:
            # when ZooKeeper last took it: a rebuilder that stopped reporting (its process
            # paused, its region cut off) keeps its node until its session expires
            found.append({**json.loads(data), "published_ms": stat.modified_ms})
        except ValueError:
            log.warning("rebuilder %s published an unreadable status: %r", name, data[:100])
    return found
