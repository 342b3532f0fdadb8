"""The safety checker: what a region's removal would make unavailable or under-replicated,
said before anything is done (LogDevice's idea).

`removal_findings` is pure over what `gather` reads from the running system: the published
topology, which bookies answer, every ledger's ensembles, ZooKeeper's members and which of
them serve, and the registered write proxies. A finding that refuses says what would make the
removal safe; `--force` goes on regardless (the command says so).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from core.errors import QuorumError
from core.routes import PublishedTopology
from core.topology import Replication
from placement import ClientLocation, ClusterView, LocatedBookie, PlacementConfig, PlacementState
from placement.errors import PlacementError, QuorumSettingsError
from placement.quorum import check_quorum


@dataclass(frozen=True, slots=True)
class LedgerView:
    """What the checker needs of one ledger: its ensembles (each with the first entry it
    holds), write quorum and its own durability rule."""

    ledger_id: int
    ensembles: tuple[tuple[str, ...], ...]
    write_quorum: int
    ack_quorum: int
    min_regions: int

    @property
    def replication(self) -> Replication:
        size = len(self.ensembles[-1]) if self.ensembles else self.write_quorum
        return Replication(size, self.write_quorum, self.ack_quorum, self.min_regions)


@dataclass(frozen=True, slots=True)
class Facts:
    published: PublishedTopology
    replication: Replication  # what new ledgers take
    up: frozenset[str]  # bookie ids registered (writable or read-only)
    writable: frozenset[str]  # of those, the ones that take new copies
    ledgers: tuple[LedgerView, ...]
    zk_members: Mapping[int, str]  # server id -> region (ZooKeeper's own configuration)
    zk_serving: frozenset[int]  # server ids that answer
    write_proxies: Mapping[str, int]  # region -> registered write proxies


@dataclass(slots=True)
class Report:
    refusals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def safe(self) -> bool:
        return not self.refusals

    def lines(self) -> list[str]:
        return [f"refused: {r}" for r in self.refusals] + [f"warning: {w}" for w in self.warnings]


def removal_findings(facts: Facts, region: str) -> Report:
    """Why removing `region` now would lose availability or durability (refusals, each with
    what would make it safe), and what it costs without losing either (warnings)."""
    report = Report()
    published = facts.published
    if region not in published.regions:
        report.refusals.append(
            f"region {region!r} is not in the published topology (regions: "
            f"{list(published.regions)})"
        )
        return report
    # a region another removal is draining is as good as gone
    leaving = {region, *published.drained}
    remaining = [r for r in published.regions if r not in leaving]
    if len(leaving) > 1:
        report.warnings.append(
            f"{sorted(leaving - {region})} is being removed too: checked as if already gone"
        )
    _check_rule(report, facts.replication, remaining)
    if report.safe:  # with the rule unkeepable, no ensemble is placeable either
        gone = {b.bookie_id for b in published.bookies if b.region in leaving}
        _check_placement(report, facts, gone, region, remaining)
        for replication in sorted({ledger.replication for ledger in facts.ledgers}, key=str):
            if replication != facts.replication and remaining:
                _check_placement(
                    report, facts, gone, region, remaining[:1], replication,
                    f"ledgers with E/W/A {replication.ensemble_size}/"
                    f"{replication.write_quorum}/{replication.ack_quorum} could not have "
                    "their copies re-made",
                )  # fmt: skip
    _check_ledgers(report, facts, region, len(remaining))
    _check_zookeeper(report, facts, region)
    homeless = [r for r in remaining if facts.write_proxies.get(r, 0) == 0]
    if len(homeless) == len(remaining):
        report.refusals.append(
            f"no write proxy is registered in {remaining}: the streams {region} owns would "
            "have nowhere to go; start a write proxy in another region first"
        )
    return report


def _check_rule(report: Report, replication: Replication, remaining: Sequence[str]) -> None:
    rep = replication
    try:
        check_quorum(rep, len(remaining))
    except QuorumSettingsError as err:
        report.refusals.append(
            f"replication E/W/A {rep.ensemble_size}/{rep.write_quorum}/{rep.ack_quorum} with "
            f"min_regions_for_durability={rep.min_regions_for_durability} cannot be kept over "
            f"the {len(remaining)} region(s) left {list(remaining)}: {'; '.join(err.problems)}. "
            "Add a region first (`globelog region add`), or lower the replication"
        )


def _check_placement(
    report: Report,
    facts: Facts,
    leaving: Collection[str],
    what: str,
    homes: Sequence[str],
    replication: Replication | None = None,
    consequence: str = "",
) -> None:
    """Ensembles of `replication` (new ledgers' by default) must be placeable from every
    region in `homes` on the bookies left once the `leaving` ones take no new copy."""
    replication = replication or facts.replication
    consequence = consequence or "a writer in {home} could not place a new ledger"
    bookies = [
        LocatedBookie(b.bookie_id, b.region, b.rack)
        for b in facts.published.bookies
        if b.bookie_id not in leaving
    ]
    cluster = ClusterView.all_writable(bookies).with_membership(
        facts.writable & {b.bookie_id for b in bookies}, ()
    )
    for home in homes:
        placement = PlacementState(cluster, PlacementConfig(ClientLocation(home)))
        try:
            placement.new_ensemble(replication)
        except (PlacementError, QuorumError) as err:
            report.refusals.append(
                f"without {what}, {consequence.format(home=home)}: {err}. Start the bookies "
                "that are down or add bookies"
            )
            return


def decommission_findings(facts: Facts, bookie_id: str) -> Report:
    """Why taking `bookie_id` out of service now would leave copies that cannot be re-made
    or writers that cannot place a ledger (refusals), and what it costs (warnings). It keeps
    serving its copies while the rebuild re-makes them elsewhere: no entry is lost by the
    decommission itself."""
    report = Report()
    if facts.published.location(bookie_id) is None:
        report.refusals.append(f"bookie {bookie_id} is not in the published topology")
        return report
    _check_placement(report, facts, {bookie_id}, bookie_id, facts.published.regions)
    holding = [
        ledger.ledger_id
        for ledger in facts.ledgers
        if any(bookie_id in ensemble for ensemble in ledger.ensembles)
    ]
    if holding:
        report.warnings.append(
            f"{len(holding)} ledger(s) hold copies on {bookie_id}: they are under-replicated "
            "until the rebuilders re-make those copies (`globelog rebuild status`)"
        )
    if bookie_id not in facts.up:
        report.warnings.append(
            f"{bookie_id} does not answer: its copies are re-made from the other copies"
        )
    return report


def _check_ledgers(report: Report, facts: Facts, region: str, regions_left: int) -> None:
    """Every entry must keep a copy on a bookie that answers outside the region (to copy it
    from), and every ledger's own rule must be keepable over the regions left."""
    region_of = {b.bookie_id: b.region for b in facts.published.bookies}
    stranded: list[int] = []
    strict: list[int] = []
    for ledger in facts.ledgers:
        if ledger.min_regions > regions_left:
            strict.append(ledger.ledger_id)
        # of an entry's W copies only A are sure to hold it: more than W - A must stay
        needed = ledger.write_quorum - ledger.ack_quorum + 1
        for ensemble in ledger.ensembles:
            if any(
                _staying(write_set, region, region_of, facts.up) < needed
                for write_set in _write_sets(ensemble, ledger.write_quorum)
            ):
                stranded.append(ledger.ledger_id)
                break
    if stranded:
        report.refusals.append(
            f"{len(stranded)} ledger(s) (first {stranded[:5]}) hold entries that may have no "
            f"copy outside {region} on a bookie that answers (of W copies only A are sure to "
            "hold an entry): they could be lost. Start the bookies that are down "
            "(`globelog bookie list`) and let the rebuild finish"
        )
    if strict:
        report.refusals.append(
            f"{len(strict)} ledger(s) (first {strict[:5]}) need copies in more regions than "
            f"the {regions_left} left. Add a region first (`globelog region add`)"
        )


def _write_sets(ensemble: Sequence[str], write_quorum: int) -> list[tuple[str, ...]]:
    size = len(ensemble)
    quorum = min(write_quorum, size)
    return [tuple(ensemble[(s + k) % size] for k in range(quorum)) for s in range(size)]


def _staying(
    write_set: Collection[str], region: str, region_of: Mapping[str, str], up: Collection[str]
) -> int:
    """How many of an entry's copies are outside `region` on bookies that answer."""
    return sum(1 for b in write_set if region_of.get(b) not in (region, None) and b in up)


def _check_zookeeper(report: Report, facts: Facts, region: str) -> None:
    members = dict(facts.zk_members)
    leaving = {i for i, r in members.items() if r == region}
    staying = set(members) - leaving
    if not staying:
        report.refusals.append(
            f"every ZooKeeper node is in {region}: add a region with a ZooKeeper node first"
        )
        return
    for name, voters in (("now", set(members)), ("after the removal", staying)):
        serving = voters & facts.zk_serving
        if len(serving) * 2 <= len(voters):
            report.refusals.append(
                f"ZooKeeper {name} has {len(voters)} voting node(s) of which {len(serving)} "
                "serve: the reconfiguration needs a majority of both the old and the new "
                "members. Start the nodes that are down"
            )
            return
    if len(staying) % 2 == 0:
        report.warnings.append(
            f"ZooKeeper keeps {len(staying)} node(s): that survives no more losses than "
            f"{len(staying) - 1} would"
        )
