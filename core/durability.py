"""The durability rule: no ack quorum may be met inside fewer than `min_regions` regions.

globelog checks the rule per write-quorum window, against the regions actually chosen,
instead of BookKeeper's worst-case formula (`A > W - floor(W / min_regions)`), which assumes
only `min_regions` regions exist. With three regions, E/W/A 3/3/2 and min_regions 2 put one
copy in each region, so every ack quorum spans two regions: the rule accepts it, and says
how many region losses new placements can still tolerate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> tuple[int, ...]:
    """Ensemble indices that store `entry_id` under round-robin striping."""
    assert 0 < write_quorum <= ensemble_size, (write_quorum, ensemble_size)
    start = entry_id % ensemble_size
    return tuple((start + i) % ensemble_size for i in range(write_quorum))


def largest_region_share(region_counts: Sequence[int], groups: int) -> int:
    """The most copies that `groups` regions together hold (0 when groups <= 0)."""
    if groups <= 0:
        return 0
    return sum(sorted(region_counts, reverse=True)[:groups])


def quorum_spans_regions(region_counts: Sequence[int], ack_quorum: int, min_regions: int) -> bool:
    """True when no `min_regions - 1` regions hold enough copies to form an ack quorum alone."""
    return largest_region_share(region_counts, min_regions - 1) <= ack_quorum - 1


def even_spread(copies: int, regions: int) -> list[int]:
    """The per-region copy counts of the most even spread of `copies` over `regions`."""
    used = min(copies, regions)
    if used <= 0:
        return []
    base, extra = divmod(copies, used)
    return [base + 1] * extra + [base] * (used - extra)


def smallest_valid_ack_quorum(write_quorum: int, min_regions: int, regions: int) -> int | None:
    """The smallest ack quorum that keeps the rule with `regions` usable regions, or None."""
    if min_regions <= 1:
        return 1
    spread = even_spread(write_quorum, regions)
    if len(spread) < min_regions:
        return None
    smallest = largest_region_share(spread, min_regions - 1) + 1
    return smallest if smallest <= write_quorum else None


def quorum_problems(
    ensemble_size: int, write_quorum: int, ack_quorum: int, min_regions: int, regions: int
) -> list[str]:
    """Every reason the settings are invalid for `regions` regions; empty when they are valid."""
    problems: list[str] = []
    if not 1 <= ack_quorum <= write_quorum <= ensemble_size:
        problems.append(
            f"need 1 <= ack_quorum <= write_quorum <= ensemble_size, got "
            f"ensemble_size={ensemble_size} write_quorum={write_quorum} ack_quorum={ack_quorum}"
        )
        return problems
    if min_regions < 1:
        problems.append(f"min_regions_for_durability must be >= 1, got {min_regions}")
        return problems
    if min_regions > regions:
        problems.append(
            f"min_regions_for_durability={min_regions} but the topology has only {regions} region(s)"
        )
        return problems
    if write_quorum < min_regions:
        problems.append(
            f"write_quorum={write_quorum} copies cannot span min_regions_for_durability="
            f"{min_regions} regions; write_quorum must be >= {min_regions}"
        )
        return problems
    smallest = smallest_valid_ack_quorum(write_quorum, min_regions, regions)
    if smallest is None or ack_quorum < smallest:
        spread = even_spread(write_quorum, regions)
        share = largest_region_share(spread, min_regions - 1)
        problems.append(
            f"ack_quorum={ack_quorum} could be met inside fewer than {min_regions} regions: "
            f"the most even spread of write_quorum={write_quorum} copies over {regions} regions is "
            f"{spread}, so {min_regions - 1} region(s) can hold {share} copies; "
            + (
                f"the smallest valid ack_quorum is {smallest}"
                if smallest is not None
                else "no ack_quorum <= write_quorum is valid; raise write_quorum"
            )
        )
    return problems


@dataclass(frozen=True, slots=True)
class WindowViolation:
    """One write-quorum window whose copies let an ack quorum sit in too few regions."""

    first_entry_index: int
    positions: tuple[int, ...]
    region_counts: tuple[tuple[str, int], ...]

    def describe(self, ack_quorum: int, min_regions: int) -> str:
        counts = ", ".join(f"{region}={count}" for region, count in self.region_counts)
        return (
            f"write set {list(self.positions)} holds {counts}: {min_regions - 1} region(s) "
            f"could form ack_quorum={ack_quorum} alone"
        )


def ensemble_violations(
    regions_by_position: Sequence[str], write_quorum: int, ack_quorum: int, min_regions: int
) -> list[WindowViolation]:
    """Every write-quorum window of an ensemble that breaks the rule (empty: it adheres)."""
    size = len(regions_by_position)
    violations: list[WindowViolation] = []
    for start in range(size if write_quorum < size else 1):
        positions = write_set(start, size, write_quorum)
        counts = Counter(regions_by_position[p] for p in positions)
        if not quorum_spans_regions(list(counts.values()), ack_quorum, min_regions):
            violations.append(WindowViolation(start, positions, tuple(sorted(counts.items()))))
    return violations


def capped_spread(copies: int, capacities: Sequence[int]) -> list[int]:
    """The most even spread of `copies` over regions holding at most `capacities` each
    (water-filling); fewer copies than asked when the capacities run out."""
    counts = [0] * len(capacities)
    for _ in range(copies):
        open_regions = [i for i, cap in enumerate(capacities) if counts[i] < cap]
        if not open_regions:
            break
        counts[min(open_regions, key=lambda i: counts[i])] += 1
    return sorted((c for c in counts if c), reverse=True)


def keeps_rule(
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    min_regions: int,
    bookies_per_region: Sequence[int],
) -> bool:
    """True when new ensembles can be placed on these bookies and keep the rule."""
    if ensemble_size > sum(bookies_per_region):
        return False
    spread = capped_spread(write_quorum, bookies_per_region)
    if sum(spread) < write_quorum or len(spread) < min_regions:
        return False
    return quorum_spans_regions(spread, ack_quorum, min_regions)


def region_losses_survived(
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    min_regions: int,
    bookies_per_region: Sequence[int],
) -> int:
    """How many regions, whichever they are, can be down while writes keep the rule
    (-1: not even with every region up)."""
    regions = len(bookies_per_region)
    survived = -1
    for down in range(regions):
        for lost in combinations(range(regions), down):
            left = [n for i, n in enumerate(bookies_per_region) if i not in lost]
            if not keeps_rule(ensemble_size, write_quorum, ack_quorum, min_regions, left):
                return survived
        survived = down
    return survived


def replication_surviving_a_region(
    min_regions: int, bookies_per_region: Sequence[int]
) -> tuple[int, int, int] | None:
    """The smallest (E, W, A) with W = E that writes through the loss of any one region and
    still acknowledges without its slowest copy (A < W); None when the bookies cannot."""
    for write_quorum in range(2, sum(bookies_per_region) + 1):
        for ack_quorum in range(1, write_quorum):
            args = (write_quorum, write_quorum, ack_quorum, min_regions, bookies_per_region)
            if region_losses_survived(*args) >= 1:
                return write_quorum, write_quorum, ack_quorum
    return None
