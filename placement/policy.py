"""The placement interface the ledger client calls, and its pure state machine `PlacementState`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from core.topology import Replication, Topology
from placement.audit import AdherenceReport, audit_ensemble
from placement.cluster import ClusterView
from placement.ensemble import EnsembleRequest, new_ensemble
from placement.errors import EnsembleNotAdheringError, NotEnoughBookiesError, UnknownRegionError
from placement.health import BookieHealth, HealthConfig
from placement.locations import ClientLocation, LocatedBookie, located_bookies
from placement.read_order import ReadOrderConfig, ReadView, read_order
from placement.replace import ReplaceRequest, replace_bookie
from placement.speculation import SpeculationConfig, speculative_delays


class PlacementPolicy(Protocol):
    """What the ledger client needs from placement; every method is pure and non-blocking."""

    def new_ensemble(
        self,
        replication: Replication,
        excluded: Collection[str] = frozenset(),
        now_s: float | None = None,
    ) -> tuple[str, ...]: ...

    def replace_bookie(
        self,
        replication: Replication,
        ensemble: Sequence[str],
        bookie_id: str,
        excluded: Collection[str] = frozenset(),
        now_s: float | None = None,
        avoid_regions: Collection[str] = frozenset(),
    ) -> tuple[str, ...]: ...

    def read_order(self, write_set: Sequence[str], now_s: float) -> tuple[str, ...]: ...

    def speculative_delays(self, order: Sequence[str], now_s: float) -> tuple[float, ...]: ...

    def record_failure(self, bookie_id: str, now_s: float) -> None: ...

    def record_slow(self, bookie_id: str, now_s: float) -> None: ...

    def record_latency(self, bookie_id: str, latency_s: float, now_s: float) -> None: ...

    def set_pending_requests(self, bookie_id: str, count: int) -> None: ...


@dataclass(frozen=True, slots=True)
class PlacementConfig:
    client: ClientLocation  # where this writer/reader runs
    health: HealthConfig = field(default_factory=HealthConfig)
    read_order: ReadOrderConfig = field(default_factory=ReadOrderConfig)
    speculation: SpeculationConfig = field(default_factory=SpeculationConfig)


class PlacementState:
    """One client's placement: cluster membership, drained regions and bookie health.

    The driver feeds ZooKeeper membership (`update_membership`), operator drains and
    observations; the ledger client asks for ensembles, replacements and read orders.
    """

    def __init__(self, cluster: ClusterView, config: PlacementConfig) -> None:
        self.cluster = cluster
        self.config = config
        self.health = BookieHealth(config.health)
        self._placements = 0  # rotates the non-local regions from one ensemble to the next

    @classmethod
    def from_topology(cls, topology: Topology, config: PlacementConfig) -> PlacementState:
        """Every topology bookie starts writable until the driver reports real membership."""
        return cls(ClusterView.all_writable(located_bookies(topology)), config)

    def update_locations(self, bookies: Iterable[LocatedBookie]) -> None:
        """The known bookies and their locations changed (a topology republished)."""
        self.cluster = self.cluster.with_bookies(bookies)

    def update_membership(self, writable: Iterable[str], read_only: Iterable[str]) -> None:
        self.cluster = self.cluster.with_membership(writable, read_only)

    def set_drained_regions(self, regions: Iterable[str]) -> None:
        """Exactly `regions` are drained (the published topology's list); unknown ones are
        ignored: a region the client has no bookie of takes no copy anyway."""
        wanted = set(regions) & set(self.cluster.regions)
        for region in set(self.cluster.drained_regions) | wanted:
            self.cluster = self.cluster.with_drained(region, region in wanted)

    def drain_region(self, region: str, drained: bool = True) -> None:
        """No new copies go to a drained region; replacements move copies out of it."""
        if region not in self.cluster.regions:
            raise UnknownRegionError(region, self.cluster.regions)
        self.cluster = self.cluster.with_drained(region, drained)

    def members_to_move(self, ensemble: Sequence[str]) -> tuple[str, ...]:
        """Members sitting in drained regions, to pass one by one to `replace_bookie`."""
        by_id = self.cluster.by_id
        drained = self.cluster.drained_regions
        return tuple(b for b in ensemble if b in by_id and by_id[b].region in drained)

    def member_to_spread(
        self, ensemble: Sequence[str], reachable: Callable[[str], bool]
    ) -> str | None:
        """A member to move so that `ensemble` spans one more region, or None.

        An ensemble placed while a region was away (two copies in each of two regions, say)
        keeps that shape for its ledger's life, and with it one more cut link stops its ack
        quorums. Once a region it does not span has a usable bookie that `reachable` says
        answers, one member of the most crowded region (the client's own last: its copies
        are the fast acks) is to move there (`replace_bookie` with that region avoided)."""
        by_id = self.cluster.by_id
        if any(b not in by_id for b in ensemble):
            return None
        copies = Counter(by_id[b].region for b in ensemble)
        spare = {
            b.region
            for b in self.cluster.usable(excluded=ensemble)
            if b.region not in copies and reachable(b.bookie_id)
        }
        if not spare:
            return None
        local = self.config.client.region
        crowded = max(copies, key=lambda region: (copies[region], region != local, region))
        if copies[crowded] < 2:
            return None
        # from the rack that holds most of the region's copies: the others keep their spread
        members = [b for b in ensemble if by_id[b].region == crowded]
        racks = Counter(by_id[b].rack for b in members)
        return max(reversed(members), key=lambda b: racks[by_id[b].rack])

    def new_ensemble(
        self,
        replication: Replication,
        excluded: Collection[str] = frozenset(),
        now_s: float | None = None,
    ) -> tuple[str, ...]:
        rotation = self._next_rotation()
        failed = self._recently_failed(now_s)

        def place(skip: frozenset[str]) -> tuple[str, ...]:
            request = EnsembleRequest(replication, self.config.client, skip, rotation, failed)
            return tuple(b.bookie_id for b in new_ensemble(request, self.cluster))

        return _quarantine_first(place, frozenset(excluded), failed)

    def replace_bookie(
        self,
        replication: Replication,
        ensemble: Sequence[str],
        bookie_id: str,
        excluded: Collection[str] = frozenset(),
        now_s: float | None = None,
        avoid_regions: Collection[str] = frozenset(),
    ) -> tuple[str, ...]:
        rotation = self._next_rotation()
        failed = self._recently_failed(now_s)

        def place(skip: frozenset[str]) -> tuple[str, ...]:
            request = ReplaceRequest(
                replication, tuple(ensemble), bookie_id, self.config.client, skip, rotation,
                failed, frozenset(avoid_regions),
            )  # fmt: skip
            return replace_bookie(request, self.cluster)

        return _quarantine_first(place, frozenset(excluded), failed)

    def audit(self, ensemble: Sequence[str], replication: Replication) -> AdherenceReport:
        return audit_ensemble(
            ensemble,
            self.cluster.by_id,
            replication.write_quorum,
            replication.ack_quorum,
            replication.min_regions_for_durability,
        )

    def read_order(self, write_set: Sequence[str], now_s: float) -> tuple[str, ...]:
        view = ReadView(
            self.config.client, self.cluster, self.health, now_s, self.config.read_order
        )
        return read_order(write_set, view)

    def speculative_delays(self, order: Sequence[str], now_s: float) -> tuple[float, ...]:
        known = self.cluster.writable | self.cluster.read_only
        unavailable = frozenset(b for b in order if b not in known)
        return speculative_delays(order, self.health, now_s, unavailable, self.config.speculation)

    def record_failure(self, bookie_id: str, now_s: float) -> None:
        self.health.record_failure(bookie_id, now_s)

    def record_slow(self, bookie_id: str, now_s: float) -> None:
        self.health.record_slow(bookie_id, now_s)

    def record_answer(self, bookie_id: str, now_s: float) -> None:
        self.health.record_answer(bookie_id, now_s)

    def answered_lately(self, bookie_id: str, now_s: float, within_s: float) -> bool:
        return self.health.answered_lately(bookie_id, now_s, within_s)

    def silent_since_failure_s(self, bookie_id: str, now_s: float) -> float | None:
        """When this client last saw `bookie_id` fail, if within the health history's TTL and
        the bookie has answered nothing this client observed since."""
        return self.health.silent_since_failure_s(bookie_id, now_s)

    def record_latency(self, bookie_id: str, latency_s: float, now_s: float) -> None:
        self.health.record_latency(bookie_id, latency_s, now_s)

    def set_pending_requests(self, bookie_id: str, count: int) -> None:
        self.health.set_pending_requests(bookie_id, count)

    def _next_rotation(self) -> int:
        self._placements += 1
        return self._placements - 1

    def _recently_failed(self, now_s: float | None) -> frozenset[str]:
        if now_s is None:
            return frozenset()
        return frozenset(
            b.bookie_id
            for b in self.cluster.bookies
            if self.health.last_failure_s(b.bookie_id, now_s) is not None
        )


def _quarantine_first(
    place: Callable[[frozenset[str]], tuple[str, ...]],
    excluded: frozenset[str],
    failed: frozenset[str],
) -> tuple[str, ...]:
    """Places without the bookies that failed within the health TTL while that is possible,
    else with them (as BookKeeper quarantines bookies). Without this, a copy lost with a dead
    bookie whose registration has not expired yet goes to its still-registered rack or region
    mate, which is just as dead, and back: a writer used up its ensemble changes in seconds
    that way when a whole region was killed."""
    if failed - excluded:
        try:
            return place(excluded | failed)
        except (NotEnoughBookiesError, EnsembleNotAdheringError):
            pass  # too few healthy bookies: a recently failed one may have recovered
    return place(excluded)
