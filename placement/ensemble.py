"""New ensembles: spread over regions (the writer's first, the rest rotated) and racks, durably.

Steps: check the settings (`placement.quorum`), count usable bookies per region, find a
region layout whose every write-quorum window keeps the durability rule
(`placement.layout`), then pick bookies inside each region for the rack spread
(`placement.racks`). Each step that cannot succeed raises an error naming its constraint.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core import runtime
from core.durability import smallest_valid_ack_quorum
from core.topology import Replication
from placement.cluster import ClusterView
from placement.errors import NotEnoughBookiesError
from placement.layout import LayoutResult, find_layout
from placement.locations import ClientLocation, LocatedBookie
from placement.quorum import check_quorum
from placement.racks import choose_in_region, rotated


@dataclass(frozen=True, slots=True)
class EnsembleRequest:
    """What the ledger client asks for; `rotation` spreads load over the non-local regions."""

    replication: Replication
    writer: ClientLocation
    excluded: frozenset[str] = frozenset()
    rotation: int = 0
    avoid: frozenset[str] = frozenset()  # picked last inside a rack (recent failures)


def describe_request(replication: Replication) -> str:
    r = replication
    return (
        f"new ensemble E/W/A {r.ensemble_size}/{r.write_quorum}/{r.ack_quorum} "
        f"(min_regions_for_durability={r.min_regions_for_durability})"
    )


def region_preference(writer_region: str, regions: Sequence[str], rotation: int) -> list[str]:
    """The writer's region first, then the others sorted and rotated."""
    others = sorted(r for r in regions if r != writer_region)
    head = [writer_region] if writer_region in regions else []
    return head + rotated(others, rotation)


def new_ensemble(request: EnsembleRequest, cluster: ClusterView) -> tuple[LocatedBookie, ...]:
    """E distinct usable bookies, in ensemble position order, keeping the rule in every window."""
    rep = request.replication
    check_quorum(rep, len(cluster.regions))
    usable = cluster.usable(request.excluded)
    if runtime.broken(runtime.IGNORE_REGIONS) and len(usable) >= rep.ensemble_size:
        local_first = sorted(usable, key=lambda b: b.region != request.writer.region)
        return tuple(local_first[: rep.ensemble_size])
    by_region: dict[str, list[LocatedBookie]] = {}
    for bookie in usable:
        by_region.setdefault(bookie.region, []).append(bookie)
    capacities = {region: len(members) for region, members in by_region.items()}
    preference = region_preference(request.writer.region, sorted(by_region), request.rotation)
    shortage = _shortage(rep, capacities)
    if shortage is None:
        layout = find_layout(rep, capacities, preference)
        if layout.regions is not None:
            return _fill_layout(layout.regions, by_region, request)
        shortage = _layout_shortage(rep, capacities, layout)
    raise NotEnoughBookiesError(
        describe_request(rep), shortage, cluster.describe_availability(request.excluded)
    )


def _shortage(rep: Replication, capacities: Mapping[str, int]) -> str | None:
    """The first simple constraint the usable bookies cannot meet, or None."""
    total = sum(capacities.values())
    if total < rep.ensemble_size:
        return (
            f"needs {rep.ensemble_size} distinct writable bookies outside excluded and "
            f"drained regions, found {total}"
        )
    needed = regions_needed(rep)
    if needed is not None and len(capacities) < needed:
        return (
            f"ack_quorum={rep.ack_quorum} of write_quorum={rep.write_quorum} needs copies in at "
            f"least {needed} region(s) so no {rep.min_regions_for_durability - 1} region(s) can "
            f"ack alone; only {len(capacities)} region(s) have usable bookies "
            f"{sorted(capacities)}"
        )
    return None


def regions_needed(rep: Replication) -> int | None:
    """The fewest regions over which a write set can keep the rule, or None if none can."""
    for regions in range(1, rep.write_quorum + 1):
        smallest = smallest_valid_ack_quorum(
            rep.write_quorum, rep.min_regions_for_durability, regions
        )
        if smallest is not None and smallest <= rep.ack_quorum:
            return regions
    return None


def _layout_shortage(rep: Replication, capacities: Mapping[str, int], layout: LayoutResult) -> str:
    counts = ", ".join(f"{r}={n}" for r, n in sorted(capacities.items()))
    text = (
        f"no order of {rep.ensemble_size} positions over the usable bookies per region "
        f"({counts}) keeps every round-robin write set of {rep.write_quorum} copies from "
        f"holding ack_quorum={rep.ack_quorum} copies in "
        f"{rep.min_regions_for_durability - 1} region(s): the regions with few bookies cannot "
        f"separate the copies of the others"
    )
    if layout.exhausted:
        text += f" (search stopped after {layout.steps} steps without an answer)"
    return text


def _fill_layout(
    layout: Sequence[str], by_region: Mapping[str, list[LocatedBookie]], request: EnsembleRequest
) -> tuple[LocatedBookie, ...]:
    """Put each region's rack-spread picks on that region's positions, in order."""
    counts = Counter(layout)
    picks: dict[str, list[LocatedBookie]] = {}
    for region, count in counts.items():
        first_rack = request.writer.rack if region == request.writer.region else None
        picks[region] = choose_in_region(
            by_region[region], count, first_rack, request.rotation, request.avoid
        )
    ensemble = tuple(picks[region].pop(0) for region in layout)
    assert len({b.bookie_id for b in ensemble}) == len(ensemble), ensemble
    return ensemble
