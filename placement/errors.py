"""The errors placement raises: each says which constraint failed and with what was available."""

from __future__ import annotations

from core.errors import GlobelogError, QuorumError


class PlacementError(GlobelogError):
    """Placement could not produce what was asked for."""

    code = "placement_error"


class NotEnoughBookiesError(PlacementError):
    """No ensemble (or replacement) keeps the rules with the bookies usable right now.

    Retriable: bookies come back, regions are undrained, exclusions expire. `constraint` names
    the rule that could not be met; `availability` lists, per region and rack, what was usable
    and why the rest was not (down, read-only, excluded, drained).
    """

    code = "not_enough_bookies"
    retriable = True

    def __init__(self, action: str, constraint: str, availability: str) -> None:
        self.action = action
        self.constraint = constraint
        self.availability = availability
        super().__init__(f"{action}: {constraint}; bookies: {availability}")


class QuorumSettingsError(QuorumError):
    """E/W/A and min_regions_for_durability cannot keep the durability rule on this topology.

    Not retriable: no bookie coming back fixes it; the settings must change.
    `smallest_ack_quorum` is the smallest valid ack quorum for the same E/W, or None when none is.
    """

    def __init__(self, settings: str, problems: list[str], smallest_ack_quorum: int | None) -> None:
        self.settings = settings
        self.problems = tuple(problems)
        self.smallest_ack_quorum = smallest_ack_quorum
        super().__init__(f"{settings}: " + "; ".join(problems))


class EnsembleNotAdheringError(PlacementError):
    """The ensemble breaks the rule outside the replaced position, so no single swap can fix it.

    The caller should close the ledger and start a new segment on a new ensemble.
    """

    code = "ensemble_not_adhering"

    def __init__(self, action: str, report: str) -> None:
        self.action = action
        self.report = report
        super().__init__(f"{action}: {report}; start a new ensemble instead")


class UnknownRegionError(PlacementError):
    """An operator named a region the topology does not have."""

    code = "unknown_region"

    def __init__(self, region: str, regions: tuple[str, ...]) -> None:
        self.region = region
        super().__init__(f"no region {region!r}; regions are {list(regions)}")
