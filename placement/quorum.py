"""Whether E/W/A and min_regions_for_durability can keep the durability rule on N regions.

core.durability judges one write set (W copies over the regions). Striping adds a second
condition: with E > W the E positions are shared by E overlapping windows, and some E cannot
be laid out at all (E/W/A 5/3/2 over three regions always leaves two copies of one region
in some window). Both are configuration errors, not a shortage of bookies, so they raise
`QuorumSettingsError` before any bookie is looked at.
"""

from __future__ import annotations

from functools import lru_cache

from core.durability import quorum_problems, smallest_valid_ack_quorum
from core.topology import Replication
from placement.errors import QuorumSettingsError
from placement.layout import ENSEMBLE_SIZE_MAX, find_layout

SETTINGS_CACHED_MAX = 256  # distinct (E, W, A, m, regions) combinations remembered


def describe_settings(replication: Replication, regions: int) -> str:
    r = replication
    return (
        f"E/W/A {r.ensemble_size}/{r.write_quorum}/{r.ack_quorum} with "
        f"min_regions_for_durability={r.min_regions_for_durability} over {regions} region(s)"
    )


def check_quorum(replication: Replication, regions: int) -> None:
    """Raise `QuorumSettingsError` unless some ensemble on `regions` regions keeps the rule."""
    r = replication
    settings = describe_settings(r, regions)
    if r.ensemble_size > ENSEMBLE_SIZE_MAX:
        raise QuorumSettingsError(
            settings, [f"ensemble_size must be <= {ENSEMBLE_SIZE_MAX}"], smallest_ack_quorum=None
        )
    problems = quorum_problems(
        r.ensemble_size, r.write_quorum, r.ack_quorum, r.min_regions_for_durability, regions
    )
    if problems:
        smallest = None
        if 1 <= r.min_regions_for_durability <= regions and r.write_quorum >= 1:
            smallest = smallest_valid_ack_quorum(
                r.write_quorum, r.min_regions_for_durability, regions
            )
        raise QuorumSettingsError(settings, problems, smallest)
    if _layout_exists(
        r.ensemble_size, r.write_quorum, r.ack_quorum, r.min_regions_for_durability, regions
    ):
        return
    raise QuorumSettingsError(settings, [_striping_problem(r, regions)], _smallest_ack(r, regions))


def _striping_problem(r: Replication, regions: int) -> str:
    smallest = _smallest_ack(r, regions)
    text = (
        f"round-robin striping of ensemble_size={r.ensemble_size} positions over {regions} "
        f"region(s) always leaves some write set of {r.write_quorum} copies where "
        f"{r.min_regions_for_durability - 1} region(s) hold ack_quorum={r.ack_quorum} copies"
    )
    if smallest is not None:
        text += f"; the smallest valid ack_quorum for this ensemble_size is {smallest}"
    for size in range(r.ensemble_size - 1, r.write_quorum - 1, -1):
        if _layout_exists(
            size, r.write_quorum, r.ack_quorum, r.min_regions_for_durability, regions
        ):
            text += f"; ensemble_size={size} keeps ack_quorum={r.ack_quorum} valid"
            break
    return text


def _smallest_ack(r: Replication, regions: int) -> int | None:
    for ack in range(r.ack_quorum + 1, r.write_quorum + 1):
        if _layout_exists(
            r.ensemble_size, r.write_quorum, ack, r.min_regions_for_durability, regions
        ):
            return ack
    return None


@lru_cache(maxsize=SETTINGS_CACHED_MAX)
def _layout_exists(
    ensemble_size: int, write_quorum: int, ack_quorum: int, min_regions: int, regions: int
) -> bool:
    """True when a layout exists with every region able to hold the whole ensemble."""
    names = [f"region-{i}" for i in range(regions)]
    capacities = dict.fromkeys(names, ensemble_size)
    replication = Replication(ensemble_size, write_quorum, ack_quorum, min_regions)
    result = find_layout(replication, capacities, names)
    # An exhausted search proves nothing: accept the settings and let the real placement
    # search report the shortage with the actual bookies.
    return result.regions is not None or result.exhausted
