"""Which bookies of one region take its copies: spread over racks as evenly as the racks allow.

The rack spread rule, per region: the chosen bookies use as many distinct racks as have
usable bookies, and no rack holds more of them than the most even fill requires (the
smallest t with sum(min(rack size, t)) >= copies). Both hold at once for the round-robin fill
below, which is why the rule is always reachable once the region's copy count is fixed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from placement.locations import LocatedBookie


def rotated(items: Sequence[str], rotation: int, first: str | None = None) -> list[str]:
    """`items` rotated by `rotation` (load spreading), with `first` moved to the front."""
    if not items:
        return []
    shift = rotation % len(items)
    order = list(items[shift:]) + list(items[:shift])
    if first is not None and first in order:
        order.remove(first)
        order.insert(0, first)
    return order


def fill_racks(capacities: Mapping[str, int], count: int, order: Sequence[str]) -> dict[str, int]:
    """Round-robin `count` copies over racks in `order`, each capped by its capacity."""
    taken = dict.fromkeys(order, 0)
    left = min(count, sum(capacities[r] for r in order))
    while left > 0:
        for rack in order:
            if left > 0 and taken[rack] < capacities[rack]:
                taken[rack] += 1
                left -= 1
    return taken


def most_even_max(capacities: Mapping[str, int], count: int) -> int:
    """The smallest per-rack maximum that still fits `count` copies."""
    most = 0
    while sum(min(c, most) for c in capacities.values()) < count:
        most += 1
        assert most <= count, (capacities, count)
    return most


def rack_spread_holds(chosen_racks: Sequence[str], capacities: Mapping[str, int]) -> bool:
    """True when one region's chosen racks are as spread as its rack capacities allow."""
    counts = Counter(chosen_racks)
    usable_racks = sum(1 for c in capacities.values() if c > 0)
    distinct_needed = min(len(chosen_racks), usable_racks)
    if len(counts) < distinct_needed:
        return False
    return max(counts.values(), default=0) <= most_even_max(capacities, len(chosen_racks))


def choose_in_region(
    candidates: Sequence[LocatedBookie],
    count: int,
    first_rack: str | None,
    rotation: int,
    avoid: Collection[str],
) -> list[LocatedBookie]:
    """`count` bookies of one region, in the order they should take its ensemble positions.

    `first_rack` (the client's rack in its own region) gets the first and, on ties, the extra
    copy. Inside a rack, bookies in `avoid` (recent failures) are picked last.
    """
    by_rack: dict[str, list[LocatedBookie]] = {}
    for bookie in sorted(candidates):
        by_rack.setdefault(bookie.rack, []).append(bookie)
    assert count <= len(candidates), (count, len(candidates))
    order = rotated(sorted(by_rack), rotation, first_rack)
    taken = fill_racks({r: len(b) for r, b in by_rack.items()}, count, order)
    picks: dict[str, list[LocatedBookie]] = {}
    for rack in order:
        members = by_rack[rack]
        shift = rotation % len(members)
        members = members[shift:] + members[:shift]
        members.sort(key=lambda b: b.bookie_id in avoid)  # stable: keeps the rotation
        picks[rack] = members[: taken[rack]]
    return _interleave(picks, order)


def _interleave(
    picks: Mapping[str, list[LocatedBookie]], order: Sequence[str]
) -> list[LocatedBookie]:
    """Spread each rack's picks evenly over the region's slots, largest rack first.

    A window holds a run of consecutive slots of the region, so evenly spaced racks keep two
    copies of one entry off the same rack whenever the counts allow it.
    """
    total = sum(len(p) for p in picks.values())
    slots: list[LocatedBookie | None] = [None] * total
    for rack in sorted(order, key=lambda r: -len(picks[r])):  # stable: ties keep `order`
        free = [i for i, s in enumerate(slots) if s is None]
        chosen = picks[rack]
        for k, bookie in enumerate(chosen):
            slots[free[k * len(free) // len(chosen)]] = bookie
    placed = [s for s in slots if s is not None]
    assert len(placed) == total
    return placed
