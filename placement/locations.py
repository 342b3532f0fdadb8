"""Where bookies and clients sit: placement's own located-bookie value and its topology adapter."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from core.topology import Bookie, Topology


@dataclass(frozen=True, slots=True, order=True)
class LocatedBookie:
    """A bookie id ("host:port", as registered in ZooKeeper) and its failure domains."""

    bookie_id: str
    region: str
    rack: str

    @property
    def location(self) -> str:
        """BookKeeper's `/region/rack` network location."""
        return f"/{self.region}/{self.rack}"


@dataclass(frozen=True, slots=True)
class ClientLocation:
    """Where a writer or reader runs; `rack` is None when the client's rack is not known."""

    region: str
    rack: str | None = None


def located(bookie: Bookie) -> LocatedBookie:
    """Adapt a `core.topology.Bookie` to placement's view of it."""
    return LocatedBookie(bookie.bookie_id, bookie.region, bookie.rack)


def located_bookies(topology: Topology) -> tuple[LocatedBookie, ...]:
    """Every bookie of the topology, located."""
    return tuple(located(b) for b in topology.bookies)


def index_by_id(bookies: Iterable[LocatedBookie]) -> dict[str, LocatedBookie]:
    """Map bookie id to located bookie; a duplicated id is a programmer error."""
    by_id: dict[str, LocatedBookie] = {}
    for bookie in bookies:
        assert bookie.bookie_id not in by_id, f"bookie {bookie.bookie_id} listed twice"
        by_id[bookie.bookie_id] = bookie
    return by_id
