"""Test clusters for placement: hand-written shapes, a hypothesis strategy, brute-force oracles."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from core.durability import ensemble_violations, smallest_valid_ack_quorum
from core.topology import Replication
from placement import ClientLocation, ClusterView, LocatedBookie

POOL_MAX = 10  # bookies in random clusters: keeps the brute force under ~30k permutations
ENSEMBLE_MAX = 5


def bookie_id(region: str, rack: str, n: int) -> str:
    return f"{region}-{rack}-{n}:3181"


def cluster_of(shape: Mapping[str, Mapping[str, int]]) -> ClusterView:
    """All writable: {"east": {"a": 2, "b": 1}} gives east-a-0, east-a-1, east-b-0."""
    bookies = [
        LocatedBookie(bookie_id(region, rack, n), region, rack)
        for region, racks in shape.items()
        for rack, count in racks.items()
        for n in range(count)
    ]
    return ClusterView.all_writable(bookies)


def three_regions(per_rack: int = 1) -> ClusterView:
    """The default topology's shape: regions east/west/eu, racks a/b."""
    return cluster_of({r: {"a": per_rack, "b": per_rack} for r in ("east", "west", "eu")})


def regions_of(ensemble: Sequence[str], cluster: ClusterView) -> list[str]:
    return [cluster.by_id[b].region for b in ensemble]


def adheres(ensemble: Sequence[str], cluster: ClusterView, rep: Replication) -> bool:
    labels = regions_of(ensemble, cluster)
    return not ensemble_violations(
        labels, rep.write_quorum, rep.ack_quorum, rep.min_regions_for_durability
    )


def _keeps_rule(labels: Sequence[str], rep: Replication) -> bool:
    return not ensemble_violations(
        labels, rep.write_quorum, rep.ack_quorum, rep.min_regions_for_durability
    )


def brute_force_exists(
    usable: Sequence[LocatedBookie], rep: Replication, must_include: str | None = None
) -> bool:
    """Whether any ordered choice of E distinct usable bookies keeps the rule in every window.

    With `must_include`, only ensembles holding a copy in that region count.
    """
    labels = [b.region for b in usable]
    seen: set[tuple[str, ...]] = set()
    for ordered in itertools.permutations(labels, rep.ensemble_size):
        if ordered in seen:
            continue
        seen.add(ordered)
        if must_include is not None and must_include not in ordered:
            continue
        if _keeps_rule(ordered, rep):
            return True
    return False


def brute_force_exists_anywhere(regions: int, rep: Replication) -> bool:
    """Whether any ensemble keeps the rule with unlimited bookies in each of `regions` regions."""
    names = [f"region{i}" for i in range(regions)]
    return any(
        _keeps_rule(labels, rep) for labels in itertools.product(names, repeat=rep.ensemble_size)
    )


def rack_spread_ok(ensemble: Sequence[str], usable: Sequence[LocatedBookie]) -> bool:
    """Independent restatement of the rack spread: per region, most distinct racks, then even."""
    by_id = {b.bookie_id: b for b in usable}
    for region in {by_id[b].region for b in ensemble}:
        capacity = Counter(b.rack for b in usable if b.region == region)
        chosen = Counter(by_id[b].rack for b in ensemble if by_id[b].region == region)
        copies = sum(chosen.values())
        if len(chosen) < min(copies, len(capacity)):
            return False
        best_max = next(
            t for t in itertools.count(1) if sum(min(c, t) for c in capacity.values()) >= copies
        )
        if max(chosen.values()) > best_max:
            return False
    return True


@dataclass(frozen=True)
class Scenario:
    """A random cluster with membership, drains, exclusions, settings and a writer."""

    cluster: ClusterView
    replication: Replication
    excluded: frozenset[str]
    writer: ClientLocation
    rotation: int

    def usable(self) -> tuple[LocatedBookie, ...]:
        return self.cluster.usable(self.excluded)


@st.composite
def shapes(draw: st.DrawFn, bookies_max: int = POOL_MAX) -> dict[str, dict[str, int]]:
    """Up to four regions of up to three racks; each bookie lands in a drawn region and rack."""
    regions = draw(st.sampled_from([1, 2, 3, 3, 4]))
    racks = draw(st.integers(1, 3))
    shape: dict[str, dict[str, int]] = {f"r{r}": {} for r in range(regions)}
    for _ in range(draw(st.integers(regions, bookies_max))):
        region = f"r{draw(st.integers(0, regions - 1))}"
        rack = f"k{draw(st.integers(0, racks - 1))}"
        shape[region][rack] = shape[region].get(rack, 0) + 1
    return {region: racks_of for region, racks_of in shape.items() if racks_of}


def _pick(draw: st.DrawFn, items: Collection[str]) -> frozenset[str]:
    return frozenset(draw(st.sets(st.sampled_from(sorted(items)))) if items else frozenset())


@st.composite
def replications(draw: st.DrawFn, regions: int, ensemble_max: int = ENSEMBLE_MAX) -> Replication:
    """Mostly settings that could work on `regions` regions, so placement is really exercised."""
    plausible = draw(st.integers(0, 4)) > 0  # one draw in five may be plain invalid
    min_regions = draw(st.sampled_from([1, 2, 2, 2, 3]))
    if plausible:
        min_regions = min(min_regions, regions)
    low = min_regions if plausible else 1
    size = draw(st.integers(low, max(low, ensemble_max)))
    write = draw(st.integers(low, size))
    smallest = smallest_valid_ack_quorum(write, min_regions, regions)
    if smallest is not None and plausible:
        ack = draw(st.integers(smallest, write))
    else:
        ack = draw(st.integers(1, write))
    return Replication(size, write, ack, min_regions)


@st.composite
def scenarios(draw: st.DrawFn, ensemble_max: int = ENSEMBLE_MAX) -> Scenario:
    shape = draw(shapes())
    full = cluster_of(shape)
    ids = [b.bookie_id for b in full.bookies]
    down = _pick(draw, ids) if draw(st.booleans()) else frozenset()
    read_only = _pick(draw, [i for i in ids if i in down])
    drained = _pick(draw, full.regions) if draw(st.integers(0, 3)) == 0 else frozenset()
    excluded = _pick(draw, ids) if draw(st.booleans()) else frozenset()
    cluster = ClusterView(full.bookies, frozenset(ids) - down, read_only, drained)
    rep = draw(replications(len(full.regions), ensemble_max))
    region = draw(st.sampled_from(sorted(shape)))
    rack = draw(st.sampled_from([*sorted(shape[region]), "k9"]))  # k9: a rack with no bookie
    writer = ClientLocation(region, rack)
    return Scenario(cluster, rep, excluded, writer, draw(st.integers(0, 7)))
