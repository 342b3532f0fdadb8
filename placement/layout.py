"""Which region each ensemble position gets: an interleaved layout keeping every write set durable.

The durability rule depends only on the region of each position, so placement first solves
this smaller problem and picks bookies inside each region afterwards (`placement.racks`).
The search tries the balanced interleaving first (every region's copies evenly spaced, the
preferred region at position 0) and backtracks only when a write-quorum window breaks the
rule. It is complete up to `LAYOUT_STEPS_MAX` placements, and every reduction it uses is
exact: unused regions of equal capacity are interchangeable; a region that fails at
position 0 appears in no layout (windows are cyclic, so any layout can be rotated to start
with it); states already seen to fail are skipped; and two necessary conditions (below, in
`_can_work`) cut branches that cannot complete. Settings with min_regions >= 3 and E >= 13
can still exhaust the bound; the result then says so instead of guessing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from core.durability import largest_region_share, quorum_spans_regions, write_set
from core.topology import Replication

ENSEMBLE_SIZE_MAX = 64  # far above any sane E; keeps the recursion depth and window tables small
LAYOUT_STEPS_MAX = 50_000  # placements tried before giving up: about 2 s; E <= 12 needs < 15_000
FAILED_STATES_MAX = 200_000  # memory bound on remembered dead ends
LAYOUTS_CACHED_MAX = 512  # distinct (settings, capacities, preference) searches remembered


@dataclass(frozen=True, slots=True)
class LayoutResult:
    """The region of each position, or None; `exhausted` when the step bound stopped the search."""

    regions: tuple[str, ...] | None
    steps: int
    exhausted: bool


def region_targets(
    ensemble_size: int, capacities: Mapping[str, int], preference: Sequence[str]
) -> dict[str, int]:
    """The most even split of the ensemble over regions, capped by each region's capacity.

    Extra copies go to regions early in `preference`, like BookKeeper's ceil-division that
    favours the local region.
    """
    targets = dict.fromkeys(preference, 0)
    left = min(ensemble_size, sum(capacities.get(r, 0) for r in preference))
    while left > 0:
        for region in preference:
            if left > 0 and targets[region] < capacities.get(region, 0):
                targets[region] += 1
                left -= 1
    return targets


def even_fill(counts: Sequence[int], upper: Sequence[int], units: int) -> list[int] | None:
    """Add `units` to `counts`, always raising the lowest count below its upper bound.

    The result has the smallest sum of its k largest counts, for every k, among all ways to
    add the units within the bounds (it is the least concentrated completion); None when the
    bounds cannot absorb the units.
    """
    filled = list(counts)
    left = units
    while left > 0:
        room = [i for i, c in enumerate(filled) if c < upper[i]]
        if not room:
            return None
        low = min(filled[i] for i in room)
        for i in room:
            if left > 0 and filled[i] == low:
                filled[i] += 1
                left -= 1
    return filled


def find_layout(
    replication: Replication,
    capacities: Mapping[str, int],
    preference: Sequence[str],
    *,
    steps_max: int = LAYOUT_STEPS_MAX,
) -> LayoutResult:
    """A region per position such that no window's ack quorum fits in fewer than min_regions.

    `capacities` is how many usable bookies each region has; `preference` orders the regions
    (the writer's first) and must name every region with capacity.
    """
    assert 0 < replication.ensemble_size <= ENSEMBLE_SIZE_MAX, replication
    assert set(capacities) <= set(preference), (capacities, preference)
    used = tuple((r, capacities[r]) for r in preference if capacities.get(r, 0) > 0)
    return _search(replication, used, steps_max)


@lru_cache(maxsize=LAYOUTS_CACHED_MAX)
def _search(
    replication: Replication, capacities: tuple[tuple[str, int], ...], steps_max: int
) -> LayoutResult:
    """The search itself, remembered: a failing search is the expensive one, and the same
    membership asks the same question for every new ledger."""
    if sum(c for _, c in capacities) < replication.ensemble_size:
        return LayoutResult(None, 0, exhausted=False)
    search = _LayoutSearch(replication, dict(capacities), [r for r, _ in capacities], steps_max)
    found = search.extend(0)
    regions = tuple(search.labels) if found else None
    return LayoutResult(regions, search.steps, exhausted=search.exhausted)


class _LayoutSearch:
    """Depth-first search over positions 0..E-1 with window counts kept incrementally."""

    def __init__(
        self,
        replication: Replication,
        capacities: Mapping[str, int],
        preference: Sequence[str],
        steps_max: int,
    ) -> None:
        ensemble_size = replication.ensemble_size
        write_quorum = replication.write_quorum
        self.size = ensemble_size
        self.write_quorum = write_quorum
        self.ack_quorum = replication.ack_quorum
        self.min_regions = replication.min_regions_for_durability
        self.preference = [r for r in preference if capacities.get(r, 0) > 0]
        self.rank = {r: i for i, r in enumerate(self.preference)}
        self.capacity = {r: capacities[r] for r in self.preference}
        self.remaining = dict(self.capacity)
        self.targets = region_targets(ensemble_size, self.capacity, self.preference)
        # With E == W there is one window; E > W gives E round-robin windows.
        starts = range(ensemble_size if write_quorum < ensemble_size else 1)
        windows = [write_set(s, ensemble_size, write_quorum) for s in starts]
        self.windows_at = [
            [w for w, ws in enumerate(windows) if p in ws] for p in range(ensemble_size)
        ]
        # Windows that straddle p (filled before p and after it), and their free positions.
        self.open_at = [
            [w for w, ws in enumerate(windows) if min(ws) < p <= max(ws)]
            for p in range(ensemble_size)
        ]
        self.free_at = [
            {w: sum(1 for q in windows[w] if q >= p) for w in self.open_at[p]}
            for p in range(ensemble_size)
        ]
        self.counts: list[dict[str, int]] = [{} for _ in windows]
        self.labels: list[str] = []
        self.failed: set[tuple[object, ...]] = set()
        self.steps_max = steps_max
        self.steps = 0
        self.exhausted = False

    def extend(self, position: int) -> bool:
        """Fill positions from `position` on; True when a full layout was found."""
        if position == self.size:
            return True
        key = self._state_key(position)
        if key in self.failed or not self._can_work(position):
            return False
        for region in self._candidates():
            if self.steps >= self.steps_max:
                self.exhausted = True
                return False
            self.steps += 1
            fits = self._place(position, region)
            if fits and self.extend(position + 1):
                return True
            self._unplace(position, region)
            if position == 0 and not self.exhausted:
                self._drop_regions_like(region)
        if not self.exhausted and len(self.failed) < FAILED_STATES_MAX:
            self.failed.add(key)
        return False

    def _drop_regions_like(self, region: str) -> None:
        """After `region` failed at position 0, no layout uses it or any region like it.

        Windows are cyclic, so any layout that uses a region can be rotated to start with it;
        a region failing at position 0 therefore appears in no layout, and neither does any
        region of the same capacity, which is interchangeable with it at position 0.
        """
        capacity = self.capacity[region]
        for other in self.preference:
            if self.capacity[other] == capacity:
                self.capacity[other] = 0
                self.remaining[other] = 0

    def _state_key(self, position: int) -> tuple[object, ...]:
        # The future depends only on the remaining capacities and on the counts of the
        # windows that straddle `position`; the exact labels behind them do not matter.
        open_counts = tuple(
            tuple(self.counts[w].get(r, 0) for r in self.preference) for w in self.open_at[position]
        )
        return (position, tuple(self.remaining.values()), open_counts)

    def _can_work(self, position: int) -> bool:
        """Necessary conditions for completing the layout from `position` on.

        Windows: each window still being filled must keep the rule when its free positions
        get the least concentrated labels the remaining capacities allow.
        Totals: every position lies in W of the E windows, so a set S of regions holds
        W * total(S) copies summed over all windows and some window holds at least the
        average W * total(S) / E; that must stay <= A - 1 for the least concentrated totals.
        """
        regions = self.preference
        spare = [self.remaining[r] for r in regions]
        for w in self.open_at[position]:
            counts = [self.counts[w].get(r, 0) for r in regions]
            upper = [c + s for c, s in zip(counts, spare, strict=True)]
            filled = even_fill(counts, upper, self.free_at[position][w])
            if filled is None or not self._spans(filled):
                return False
        used = [self.capacity[r] - self.remaining[r] for r in regions]
        upper = [self.capacity[r] for r in regions]
        totals = even_fill(used, upper, self.size - position)
        if totals is None:
            return False
        share = largest_region_share(totals, self.min_regions - 1)
        return share * self.write_quorum <= (self.ack_quorum - 1) * self.size

    def _spans(self, counts: Sequence[int]) -> bool:
        return quorum_spans_regions(counts, self.ack_quorum, self.min_regions)

    def _candidates(self) -> list[str]:
        ordered = sorted((r for r in self.preference if self.remaining[r] > 0), key=self._order)
        fresh_capacities: set[int] = set()
        candidates = []
        for region in ordered:
            if self.remaining[region] == self.capacity[region]:
                # Unused regions of equal capacity are interchangeable: try one of them.
                if self.capacity[region] in fresh_capacities:
                    continue
                fresh_capacities.add(self.capacity[region])
            candidates.append(region)
        return candidates

    def _order(self, region: str) -> tuple[bool, float, int]:
        used = self.capacity[region] - self.remaining[region]
        target = self.targets.get(region, 0)
        # Spacing each region's copies evenly (its k-th copy near k*E/target) balances windows.
        ideal = used * self.size / target if target else float(self.size)
        return (used >= target, ideal, self.rank[region])

    def _place(self, position: int, region: str) -> bool:
        self.labels.append(region)
        self.remaining[region] -= 1
        fits = True
        for w in self.windows_at[position]:
            counts = self.counts[w]
            counts[region] = counts.get(region, 0) + 1
            # Counts only grow as positions fill, so a window broken now stays broken.
            if not quorum_spans_regions(list(counts.values()), self.ack_quorum, self.min_regions):
                fits = False
        return fits

    def _unplace(self, position: int, region: str) -> None:
        self.labels.pop()
        self.remaining[region] += 1
        for w in self.windows_at[position]:
            self.counts[w][region] -= 1
