"""Membership as placement sees it: located bookies, writable or read-only, and drained regions."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace

from placement.locations import LocatedBookie, index_by_id

USABLE = "usable"
READ_ONLY = "read-only"
DOWN = "down"
EXCLUDED = "excluded"
DRAINED = "drained"
MEMBER = "already in the ensemble"
REPLACED = "being replaced"


@dataclass(frozen=True, slots=True)
class ClusterView:
    """An immutable snapshot; the driver builds a new one when ZooKeeper membership changes.

    A bookie is usable for new copies when it is writable, not excluded by the caller and not in
    a drained region. Read-only bookies still serve reads; bookies that are neither writable nor
    read-only are down.
    """

    bookies: tuple[LocatedBookie, ...]
    writable: frozenset[str]
    read_only: frozenset[str] = frozenset()
    drained_regions: frozenset[str] = frozenset()
    by_id: dict[str, LocatedBookie] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_id", index_by_id(self.bookies))

    @classmethod
    def all_writable(cls, bookies: Iterable[LocatedBookie]) -> ClusterView:
        listed = tuple(bookies)
        return cls(listed, frozenset(b.bookie_id for b in listed))

    @property
    def regions(self) -> tuple[str, ...]:
        """Every region that holds at least one known bookie, drained or not."""
        return tuple(sorted({b.region for b in self.bookies}))

    def with_bookies(self, bookies: Iterable[LocatedBookie]) -> ClusterView:
        """The same membership and drains over a new list of known bookies and locations."""
        return replace(self, bookies=tuple(bookies))

    def with_membership(self, writable: Iterable[str], read_only: Iterable[str]) -> ClusterView:
        return replace(self, writable=frozenset(writable), read_only=frozenset(read_only))

    def with_drained(self, region: str, drained: bool) -> ClusterView:
        regions = self.drained_regions | {region} if drained else self.drained_regions - {region}
        return replace(self, drained_regions=frozenset(regions))

    def status(
        self, bookie: LocatedBookie, excluded: Collection[str], ensemble: Collection[str] = ()
    ) -> str:
        """Why a bookie can or cannot take a new copy; the first reason that applies wins."""
        if bookie.region in self.drained_regions:
            return DRAINED
        if bookie.bookie_id in ensemble:
            return MEMBER
        if bookie.bookie_id in excluded:
            return EXCLUDED
        if bookie.bookie_id in self.writable:
            return USABLE
        if bookie.bookie_id in self.read_only:
            return READ_ONLY
        return DOWN

    def usable(self, excluded: Collection[str]) -> tuple[LocatedBookie, ...]:
        """Bookies that may take a new copy, sorted by id so choices are deterministic."""
        return tuple(sorted(b for b in self.bookies if self.status(b, excluded) == USABLE))

    def describe_availability(
        self, excluded: Collection[str], ensemble: Collection[str] = (), replaced: str = ""
    ) -> str:
        """Per region: usable bookies per rack, then how many are down, read-only, excluded...

        For a replacement, `ensemble` members and the `replaced` bookie are counted apart.
        """
        parts = [
            self._describe_region(region, excluded, ensemble, replaced) for region in self.regions
        ]
        unlocated = sorted(self.writable - set(self.by_id))
        if unlocated:
            parts.append(f"writable but not in the topology (ignored): {unlocated}")
        return "; ".join(parts)

    def _describe_region(
        self, region: str, excluded: Collection[str], ensemble: Collection[str], replaced: str
    ) -> str:
        members = [b for b in self.bookies if b.region == region]
        if region in self.drained_regions:
            return f"{region}: drained ({len(members)} bookie(s), none usable)"
        usable_by_rack: dict[str, int] = {}
        others: dict[str, int] = {}
        for bookie in members:
            usable_by_rack.setdefault(bookie.rack, 0)
            reason = self.status(bookie, excluded, ensemble)
            if bookie.bookie_id == replaced:
                reason = REPLACED
            if reason == USABLE:
                usable_by_rack[bookie.rack] += 1
            else:
                others[reason] = others.get(reason, 0) + 1
        racks = ", ".join(f"{rack}={n}" for rack, n in sorted(usable_by_rack.items()))
        text = f"{region}: {sum(usable_by_rack.values())} usable ({racks})"
        for reason in (DOWN, READ_ONLY, EXCLUDED, MEMBER, REPLACED):
            if others.get(reason):
                text += f", {others[reason]} {reason}"
        return text
