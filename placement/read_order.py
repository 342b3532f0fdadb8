"""Read order for one entry's write set: local rack, local region, remote; the unhealthy move back.

Mapping to BookKeeper's categories (docs/placement.md, read order), first to last:
  HEALTHY      BK LOCAL and REMOTE, split here into local rack < local region < remote
               (BK does not prefer the local rack)
  FAILED       BK LOCAL_FAIL / REMOTE_FAIL: local first, then the oldest failure first
               (BK ranks LOCAL_FAIL before healthy remotes; here every failure moves back)
  READ_ONLY    BK READ_ONLY: still serves reads, but cannot take writes (disk full)
  SLOW         BK SLOW: fewest pending requests first; slowness is a recent speculative
               loss, a pending-request backlog, or a median latency far above the region's
  UNAVAILABLE  BK UNAVAIL: neither writable nor read-only
Then, like BK's cross-region insertion, the first healthy remote replica moves to position
min(#healthy local, 2), so the first speculative retries cross a failure domain.
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from placement.cluster import ClusterView
from placement.health import BookieHealth
from placement.locations import ClientLocation

PENDING_REQUESTS_SLOW = 32  # BK reorderThresholdPendingRequests: this many above the least busy
LATENCY_FACTOR_SLOW = 3.0  # median this many times the region peers' median is slow
LATENCY_SLOW_S = 1.0  # no healthy bookie takes a second per read, whatever its peers do
LATENCY_SAMPLES_MIN = 5  # fewer samples say nothing about a bookie's speed
REMOTE_POSITION_MAX = 2  # BK remoteNodeInReorderSequence


class Locality(enum.IntEnum):
    LOCAL_RACK = 0
    LOCAL_REGION = 1
    REMOTE = 2


class Standing(enum.IntEnum):
    HEALTHY = 0
    FAILED = 1
    READ_ONLY = 2
    SLOW = 3
    UNAVAILABLE = 4


@dataclass(frozen=True, slots=True)
class ReadOrderConfig:
    pending_requests_slow: int = PENDING_REQUESTS_SLOW
    latency_factor_slow: float = LATENCY_FACTOR_SLOW
    latency_slow_s: float = LATENCY_SLOW_S
    latency_samples_min: int = LATENCY_SAMPLES_MIN
    remote_position_max: int = REMOTE_POSITION_MAX


@dataclass(frozen=True, slots=True)
class ReadView:
    """Everything a read order depends on, at one instant."""

    reader: ClientLocation
    cluster: ClusterView
    health: BookieHealth
    now_s: float
    config: ReadOrderConfig = ReadOrderConfig()


@dataclass(frozen=True, slots=True)
class ReadCandidate:
    """One replica with the facts its rank came from (for logs and tests)."""

    bookie_id: str
    write_set_index: int
    locality: Locality
    standing: Standing
    rank: tuple[float, ...]


def read_order(write_set: Sequence[str], view: ReadView) -> tuple[str, ...]:
    """The order to try the replicas of one entry in; a permutation of `write_set`."""
    return tuple(c.bookie_id for c in rank_replicas(write_set, view))


def rank_replicas(write_set: Sequence[str], view: ReadView) -> list[ReadCandidate]:
    least_pending = min((view.health.pending_requests(b) for b in write_set), default=0)
    candidates = [_candidate(b, i, view, least_pending) for i, b in enumerate(write_set)]
    ranked = sorted(candidates, key=lambda c: c.rank)
    healthy_local = sum(
        1 for c in ranked if c.standing is Standing.HEALTHY and c.locality < Locality.REMOTE
    )
    remote = next(
        (c for c in ranked if c.standing is Standing.HEALTHY and c.locality is Locality.REMOTE),
        None,
    )
    if remote is not None:
        ranked.remove(remote)
        ranked.insert(min(healthy_local, view.config.remote_position_max), remote)
    return ranked


def _candidate(bookie_id: str, index: int, view: ReadView, least_pending: int) -> ReadCandidate:
    cluster, health = view.cluster, view.health
    locality = _locality(bookie_id, view.reader, cluster)
    failed_s = health.last_failure_s(bookie_id, view.now_s)
    writable = bookie_id in cluster.writable
    if not writable and bookie_id not in cluster.read_only:
        standing, detail = Standing.UNAVAILABLE, 0.0
    elif writable and failed_s is not None:
        standing, detail = Standing.FAILED, failed_s
    elif _is_slow(bookie_id, view, least_pending):
        standing, detail = Standing.SLOW, float(health.pending_requests(bookie_id))
    elif not writable:
        standing, detail = Standing.READ_ONLY, 0.0
    else:
        standing, detail = Standing.HEALTHY, 0.0
    # SLOW ranks by pending requests alone (as BK); the other groups by locality first.
    where = 0 if standing in (Standing.SLOW, Standing.UNAVAILABLE) else int(locality)
    rank = (float(standing), float(where), detail, float(index))
    return ReadCandidate(bookie_id, index, locality, standing, rank)


def _locality(bookie_id: str, reader: ClientLocation, cluster: ClusterView) -> Locality:
    bookie = cluster.by_id.get(bookie_id)
    if bookie is None or bookie.region != reader.region:
        return Locality.REMOTE  # an unlocated bookie is remote, like BK's UnknownRegion
    return Locality.LOCAL_RACK if bookie.rack == reader.rack else Locality.LOCAL_REGION


def _is_slow(bookie_id: str, view: ReadView, least_pending: int) -> bool:
    health, config = view.health, view.config
    if health.marked_slow(bookie_id, view.now_s):
        return True
    if health.pending_requests(bookie_id) - least_pending >= config.pending_requests_slow:
        return True
    median_s = health.latency_quantile_s(bookie_id, 0.5, view.now_s, config.latency_samples_min)
    if median_s is None:
        return False
    if median_s > config.latency_slow_s:
        return True
    peers_s = _peer_medians_s(bookie_id, view)
    return bool(peers_s) and median_s > config.latency_factor_slow * statistics.median(peers_s)


def _peer_medians_s(bookie_id: str, view: ReadView) -> list[float]:
    """Recent medians of the other bookies of the same region: they share the WAN distance."""
    bookie = view.cluster.by_id.get(bookie_id)
    if bookie is None:
        return []
    medians = []
    for peer in view.cluster.bookies:
        if peer.region == bookie.region and peer.bookie_id != bookie_id:
            median_s = view.health.latency_quantile_s(
                peer.bookie_id, 0.5, view.now_s, view.config.latency_samples_min
            )
            if median_s is not None:
                medians.append(median_s)
    return medians
