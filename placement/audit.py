"""Adherence audit: checks any ensemble against the durability rule and the rack spread.

BookKeeper's region-aware policy answers "adheres" for every ensemble
(`isEnsembleAdheringToPlacementPolicy` is a stub), so metadata written by other tools or by
an older topology goes unchecked. This audit reports, like BookKeeper's adherence levels:
FAIL when some write set's ack quorum fits in too few regions (or the ensemble cannot be
checked), MEETS_SOFT when only the rack spread could be better, MEETS_STRICT otherwise.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from core.durability import ensemble_violations, write_set
from placement.locations import LocatedBookie
from placement.racks import most_even_max, rack_spread_holds


class Adherence(enum.Enum):
    FAIL = "fail"
    MEETS_SOFT = "meets_soft"
    MEETS_STRICT = "meets_strict"


@dataclass(frozen=True, slots=True)
class WindowFinding:
    """One write set (positions `positions`, used by entries first_entry, first_entry + E, ...)."""

    first_entry: int
    positions: tuple[int, ...]
    bookies: tuple[str, ...]
    sentence: str


@dataclass(frozen=True, slots=True)
class AdherenceReport:
    ensemble: tuple[str, ...]
    write_quorum: int
    ack_quorum: int
    min_regions: int
    problems: tuple[str, ...]  # whole-ensemble faults: bad quorum, duplicates, unknown bookies
    durability: tuple[WindowFinding, ...]  # write sets an ack quorum could finish too locally
    racks: tuple[str, ...]  # rack spread shortfalls (soft)

    @property
    def adherence(self) -> Adherence:
        if self.problems or self.durability:
            return Adherence.FAIL
        return Adherence.MEETS_SOFT if self.racks else Adherence.MEETS_STRICT

    @property
    def adheres(self) -> bool:
        """True when the durability rule holds; the rack spread is advisory."""
        return self.adherence is not Adherence.FAIL

    def describe(self) -> str:
        head = (
            f"ensemble {list(self.ensemble)} with W/A {self.write_quorum}/{self.ack_quorum} "
            f"and min_regions_for_durability={self.min_regions}: {self.adherence.value}"
        )
        lines = [head]
        lines += [f"  - {p}" for p in self.problems]
        lines += [f"  - {w.sentence}" for w in self.durability]
        lines += [f"  - (rack spread) {r}" for r in self.racks]
        if self.adherence is Adherence.MEETS_STRICT:
            lines.append(
                f"  every write set's ack quorums span >= {self.min_regions} region(s) "
                "and copies are spread over racks"
            )
        return "\n".join(lines)


def audit_ensemble(
    ensemble: Sequence[str],
    locations: Mapping[str, LocatedBookie] | Iterable[LocatedBookie],
    write_quorum: int,
    ack_quorum: int,
    min_regions: int,
) -> AdherenceReport:
    """Check an ensemble; `locations` should cover the whole cluster so racks can be judged."""
    where = locations if isinstance(locations, Mapping) else {b.bookie_id: b for b in locations}
    members = tuple(ensemble)
    problems = _whole_ensemble_problems(members, where, write_quorum, ack_quorum, min_regions)
    if problems and not (1 <= ack_quorum <= write_quorum <= len(members) and min_regions >= 1):
        return AdherenceReport(members, write_quorum, ack_quorum, min_regions, problems, (), ())
    durability = _durability_findings(members, where, write_quorum, ack_quorum, min_regions)
    racks = _window_rack_findings(members, where, write_quorum) + _region_rack_findings(
        members, where
    )
    return AdherenceReport(
        members, write_quorum, ack_quorum, min_regions, problems, durability, racks
    )


def _whole_ensemble_problems(
    members: Sequence[str],
    where: Mapping[str, LocatedBookie],
    write_quorum: int,
    ack_quorum: int,
    min_regions: int,
) -> tuple[str, ...]:
    problems = []
    if not 1 <= ack_quorum <= write_quorum <= len(members):
        problems.append(
            f"need 1 <= ack_quorum <= write_quorum <= ensemble size, got ack_quorum={ack_quorum} "
            f"write_quorum={write_quorum} ensemble size={len(members)}"
        )
    if min_regions < 1:
        problems.append(f"min_regions_for_durability must be >= 1, got {min_regions}")
    for bookie, count in sorted(Counter(members).items()):
        if count > 1:
            at = [i for i, b in enumerate(members) if b == bookie]
            problems.append(
                f"bookie {bookie} holds positions {at}: one failure loses {count} copies"
            )
    unknown = [b for b in members if b not in where]
    if unknown:
        problems.append(f"bookies {unknown} have no known region/rack")
    return tuple(problems)


def _durability_findings(
    members: Sequence[str],
    where: Mapping[str, LocatedBookie],
    write_quorum: int,
    ack_quorum: int,
    min_regions: int,
) -> tuple[WindowFinding, ...]:
    # An unknown bookie gets a region of its own here; every window holding one is reported
    # below anyway, so the optimism never hides a problem.
    labels = [where[b].region if b in where else f"?{b}" for b in members]
    broken = {
        v.first_entry_index: v.describe(ack_quorum, min_regions)
        for v in ensemble_violations(labels, write_quorum, ack_quorum, min_regions)
    }
    size = len(members)
    findings = []
    for start in range(size if write_quorum < size else 1):
        positions = write_set(start, size, write_quorum)
        bookies = tuple(members[p] for p in positions)
        unknown = [b for b in bookies if b not in where]
        if start in broken:
            reason = broken[start]
        elif unknown:
            reason = (
                f"write set {list(positions)} includes {unknown} with no known region, "
                "so its ack quorums cannot be checked"
            )
        else:
            continue
        entries = f"entries {start}, {start + size}, ..." if write_quorum < size else "every entry"
        sentence = f"{entries} on {list(bookies)}: {reason}"
        findings.append(WindowFinding(start, positions, bookies, sentence))
    return tuple(findings)


def _window_rack_findings(
    members: Sequence[str], where: Mapping[str, LocatedBookie], write_quorum: int
) -> tuple[str, ...]:
    """Write sets with two copies on one rack while their region's members use another rack."""
    member_racks: dict[str, set[str]] = {}
    for b in members:
        if b in where:
            member_racks.setdefault(where[b].region, set()).add(where[b].rack)
    size = len(members)
    findings = []
    for start in range(size if write_quorum < size else 1):
        positions = write_set(start, size, write_quorum)
        located = [where[members[p]] for p in positions if members[p] in where]
        per_rack = Counter((b.region, b.rack) for b in located)
        for (region, rack), copies in sorted(per_rack.items()):
            used = {b.rack for b in located if b.region == region}
            spare = sorted(member_racks[region] - used)
            if copies > 1 and spare:
                findings.append(
                    f"write set {list(positions)} keeps {copies} copies on {region}/{rack} "
                    f"while the ensemble also uses {region} rack(s) {spare}"
                )
    return tuple(findings)


def _region_rack_findings(
    members: Sequence[str], where: Mapping[str, LocatedBookie]
) -> tuple[str, ...]:
    """Regions whose members crowd fewer racks than the region's bookies would allow."""
    capacity: dict[str, Counter[str]] = {}
    for bookie in where.values():
        capacity.setdefault(bookie.region, Counter())[bookie.rack] += 1
    chosen: dict[str, list[str]] = {}
    for b in dict.fromkeys(members):  # a duplicate is reported elsewhere; count it once here
        if b in where:
            chosen.setdefault(where[b].region, []).append(where[b].rack)
    findings = []
    for region, racks in sorted(chosen.items()):
        if not rack_spread_holds(racks, capacity[region]):
            findings.append(
                f"{region} holds {dict(sorted(Counter(racks).items()))} per rack; its racks "
                f"{dict(sorted(capacity[region].items()))} allow at most "
                f"{most_even_max(capacity[region], len(racks))} per rack over more racks"
            )
    return tuple(findings)
