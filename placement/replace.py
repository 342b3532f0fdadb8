"""Replacing one ensemble member: same rack first, then same region, then another allowed region.

A member that fell silent (no answer, rather than a failure answered) is more likely cut off
by the network than dead alone, and its region mates with it: then its region comes last.
Only candidates that keep the durability rule in every window are considered, so the
preference order never trades durability for locality. A member in a drained region is
always moved out of it, which is how an operator empties a region one replacement at a time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.durability import ensemble_violations
from core.topology import Replication
from placement.cluster import ClusterView
from placement.ensemble import region_preference
from placement.errors import EnsembleNotAdheringError, NotEnoughBookiesError
from placement.locations import ClientLocation, LocatedBookie
from placement.quorum import check_quorum

FRESH_REGION = "(new copy)"  # a region no bookie has: the most favourable label a copy can get


@dataclass(frozen=True, slots=True)
class ReplaceRequest:
    replication: Replication
    ensemble: tuple[str, ...]
    bookie_id: str  # the member to replace; its position keeps the same index
    writer: ClientLocation
    excluded: frozenset[str] = frozenset()
    rotation: int = 0
    avoid: frozenset[str] = frozenset()  # picked last among equals (recent failures)
    # picked last of all regions (a silent member's: likely behind the same cut)
    avoid_regions: frozenset[str] = frozenset()


def replace_bookie(request: ReplaceRequest, cluster: ClusterView) -> tuple[str, ...]:
    """The ensemble with `bookie_id` swapped for a usable bookie that keeps every window durable."""
    rep = request.replication
    ensemble = request.ensemble
    assert len(ensemble) == rep.ensemble_size, (ensemble, rep)
    assert len(set(ensemble)) == len(ensemble), f"duplicate members in {ensemble}"
    index = ensemble.index(request.bookie_id)
    action = f"replace {request.bookie_id} at position {index} of {list(ensemble)}"
    check_quorum(rep, len(cluster.regions))
    labels = _member_regions(action, ensemble, index, cluster.by_id)
    _require_fixable(action, labels, index, rep)
    candidates = cluster.usable(set(request.excluded) | set(ensemble))
    valid = {
        region
        for region in {c.region for c in candidates}
        if not _violations(labels, index, region, rep)
    }
    choice = _choose(
        request, index, labels, [c for c in candidates if c.region in valid], cluster.by_id
    )
    if choice is None:
        availability = cluster.describe_availability(
            request.excluded, set(ensemble) - {request.bookie_id}, request.bookie_id
        )
        raise NotEnoughBookiesError(
            action, _why_none(labels, index, rep, cluster, candidates), availability
        )
    return (*ensemble[:index], choice.bookie_id, *ensemble[index + 1 :])


def _member_regions(
    action: str, ensemble: Sequence[str], index: int, locations: Mapping[str, LocatedBookie]
) -> list[str]:
    """Region per position; every member but the replaced one must have a known location."""
    unknown = [b for i, b in enumerate(ensemble) if i != index and b not in locations]
    if unknown:
        raise EnsembleNotAdheringError(
            action, f"members {unknown} have no known location, so no write set can be checked"
        )
    return [locations[b].region if i != index else FRESH_REGION for i, b in enumerate(ensemble)]


def _violations(labels: Sequence[str], index: int, region: str, rep: Replication) -> list[str]:
    trial = list(labels)
    trial[index] = region
    found = ensemble_violations(
        trial, rep.write_quorum, rep.ack_quorum, rep.min_regions_for_durability
    )
    return [v.describe(rep.ack_quorum, rep.min_regions_for_durability) for v in found]


def _require_fixable(action: str, labels: Sequence[str], index: int, rep: Replication) -> None:
    """Raise when windows break even with the most favourable replacement: no swap can help."""
    broken = _violations(labels, index, FRESH_REGION, rep)
    if broken:
        raise EnsembleNotAdheringError(
            action,
            f"even a copy in a region of its own {FRESH_REGION!r} at position {index} leaves "
            + "; ".join(broken),
        )


def _choose(
    request: ReplaceRequest,
    index: int,
    labels: Sequence[str],
    candidates: Sequence[LocatedBookie],
    locations: Mapping[str, LocatedBookie],
) -> LocatedBookie | None:
    failed = locations.get(request.bookie_id)
    if failed is not None and failed.region not in request.avoid_regions:
        same_rack = [c for c in candidates if (c.region, c.rack) == (failed.region, failed.rack)]
        same_region = [c for c in candidates if c.region == failed.region]
        for tier in (same_rack, same_region):
            if tier:
                return _pick_in_region(tier, request, index, locations)
    others = Counter(r for i, r in enumerate(labels) if i != index)
    preference = region_preference(
        request.writer.region, sorted({c.region for c in candidates}), request.rotation
    )

    # The region with the fewest copies first: it spreads the ensemble the most.
    def order(region: str) -> tuple[bool, int, int]:
        return region in request.avoid_regions, others[region], preference.index(region)

    for region in sorted(preference, key=order):
        tier = [c for c in candidates if c.region == region]
        if tier:
            return _pick_in_region(tier, request, index, locations)
    return None


def _pick_in_region(
    tier: Sequence[LocatedBookie],
    request: ReplaceRequest,
    index: int,
    locations: Mapping[str, LocatedBookie],
) -> LocatedBookie:
    """A rack the rest of the ensemble uses least in that region, then a healthy bookie."""
    region = tier[0].region
    used = Counter(
        locations[b].rack
        for i, b in enumerate(request.ensemble)
        if i != index and locations[b].region == region
    )
    ordered = sorted(tier)
    shift = request.rotation % len(ordered)
    ordered = ordered[shift:] + ordered[:shift]
    return min(ordered, key=lambda b: (used[b.rack], b.bookie_id in request.avoid))


def _why_none(
    labels: Sequence[str],
    index: int,
    rep: Replication,
    cluster: ClusterView,
    candidates: Sequence[LocatedBookie],
) -> str:
    """One reason per region why none of its bookies can take the position."""
    with_candidates = {c.region for c in candidates}
    reasons = []
    for region in cluster.regions:
        if region in cluster.drained_regions:
            reasons.append(f"{region} is drained")
        elif region not in with_candidates:
            reasons.append(f"{region} has no usable bookie outside the ensemble")
        else:
            broken = _violations(labels, index, region, rep)
            reasons.append(f"a copy in {region} would leave {broken[0]}")
    return f"no usable bookie keeps every write set durable at position {index}: " + "; ".join(
        reasons
    )
