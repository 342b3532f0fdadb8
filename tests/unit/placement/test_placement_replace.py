"""Replacing a member: same rack, then same region, then another region; drains move copies out."""

from __future__ import annotations

import pytest

from core.topology import Replication
from placement import (
    ClientLocation,
    ClusterView,
    EnsembleNotAdheringError,
    NotEnoughBookiesError,
    ReplaceRequest,
    replace_bookie,
)
from tests.unit.placement.placement_clusters import adheres, cluster_of, regions_of

pytestmark = pytest.mark.unit

REP_332 = Replication(3, 3, 2, 2)
EAST_A = ClientLocation("east", "a")
ENSEMBLE = ("east-a-0:3181", "west-a-0:3181", "eu-a-0:3181")


def replace(
    cluster: ClusterView,
    ensemble: tuple[str, ...],
    bookie_id: str,
    replication: Replication = REP_332,
    excluded: frozenset[str] = frozenset(),
) -> tuple[str, ...]:
    request = ReplaceRequest(replication, ensemble, bookie_id, EAST_A, excluded)
    return replace_bookie(request, cluster)


def roomy() -> ClusterView:
    return cluster_of({r: {"a": 2, "b": 2} for r in ("east", "west", "eu")})


def test_same_rack_first() -> None:
    replaced = replace(roomy(), ENSEMBLE, "west-a-0:3181")
    assert replaced == ("east-a-0:3181", "west-a-1:3181", "eu-a-0:3181")


def test_same_region_when_the_rack_has_no_usable_bookie() -> None:
    cluster = roomy()
    replaced = replace(cluster, ENSEMBLE, "west-a-0:3181", excluded=frozenset({"west-a-1:3181"}))
    assert cluster.by_id[replaced[1]].location == "/west/b"


def test_another_region_when_the_failed_region_has_no_other_bookie() -> None:
    cluster = cluster_of({"east": {"a": 1}, "west": {"a": 1}, "eu": {"a": 1}, "ap": {"a": 1}})
    replaced = replace(cluster, ENSEMBLE, "west-a-0:3181")
    assert replaced == ("east-a-0:3181", "ap-a-0:3181", "eu-a-0:3181")


def test_a_silent_members_region_comes_last() -> None:
    """A member that answered nothing is likely behind a cut with its rack and region mates:
    another region that keeps the rule is chosen first (4/4/3, two regions per ack quorum)."""
    rep = Replication(4, 4, 3, 2)
    ensemble = ("east-a-0:3181", "eu-a-0:3181", "west-a-0:3181", "east-a-1:3181")
    cluster = roomy()
    told = ReplaceRequest(rep, ensemble, "west-a-0:3181", EAST_A, avoid_regions=frozenset({"west"}))
    replaced = replace_bookie(told, cluster)
    assert regions_of(replaced, cluster) == ["east", "eu", "eu", "east"]
    assert adheres(replaced, cluster, rep)
    # without the hint the same rack is the choice, as for a member that answered a failure
    assert replace(cluster, ensemble, "west-a-0:3181", rep)[2] == "west-a-1:3181"


def test_a_silent_members_region_is_still_used_when_only_it_keeps_the_rule() -> None:
    """The hint orders; it never trades the rule away: with east holding two copies, a third
    in east would leave an ack quorum in one region, so west it is."""
    rep = Replication(4, 4, 3, 2)
    ensemble = ("east-a-0:3181", "east-a-1:3181", "west-a-0:3181", "west-b-0:3181")
    cluster = cluster_of({"east": {"a": 2}, "west": {"a": 2, "b": 1}})
    told = ReplaceRequest(rep, ensemble, "west-a-0:3181", EAST_A, avoid_regions=frozenset({"west"}))
    assert replace_bookie(told, cluster)[2] == "west-a-1:3181"


def test_another_region_is_chosen_only_if_it_keeps_the_rule() -> None:
    # Moving west's copy to east would leave east with 2 of 3 copies, an ack quorum by itself.
    cluster = cluster_of({"east": {"a": 2}, "west": {"a": 1}, "eu": {"a": 1}})
    with pytest.raises(NotEnoughBookiesError) as caught:
        replace(cluster, ENSEMBLE, "west-a-0:3181")
    constraint = caught.value.constraint
    assert "a copy in east would leave write set [0, 1, 2] holds east=2, eu=1" in constraint
    assert "west has no usable bookie outside the ensemble" in constraint
    assert "being replaced" in caught.value.availability


def test_replacement_prefers_a_rack_the_region_does_not_use_yet() -> None:
    cluster = cluster_of({"east": {"a": 3, "b": 1}, "west": {"a": 2, "b": 1}})
    ensemble = ("east-a-0:3181", "west-a-0:3181", "east-b-0:3181", "west-b-0:3181")
    replaced = replace(cluster, ensemble, "east-b-0:3181", Replication(4, 4, 3, 2))
    # east/b has no other bookie; east/a is already used, but it is the only rack left.
    assert replaced[2] == "east-a-1:3181"
    cluster = cluster_of({"east": {"a": 2, "b": 1, "c": 1}, "west": {"a": 2}})
    ensemble = ("east-a-0:3181", "west-a-0:3181", "east-b-0:3181", "west-a-1:3181")
    replaced = replace(cluster, ensemble, "east-b-0:3181", Replication(4, 4, 3, 2))
    assert replaced[2] == "east-c-0:3181"  # rack c keeps east's copies on two racks


def test_drained_region_moves_its_copies_out_one_replacement_at_a_time() -> None:
    cluster = cluster_of({r: {"a": 2, "b": 2} for r in ("east", "west", "eu", "ap")})
    cluster = cluster.with_drained("west", drained=True)
    replaced = replace(cluster, ENSEMBLE, "west-a-0:3181")
    assert "west" not in regions_of(replaced, cluster)
    assert adheres(replaced, cluster, REP_332)


def test_drained_region_with_nowhere_else_to_go_says_so() -> None:
    cluster = cluster_of({"east": {"a": 1}, "west": {"a": 2}, "eu": {"a": 1}})
    cluster = cluster.with_drained("west", drained=True)
    with pytest.raises(NotEnoughBookiesError, match="west is drained"):
        replace(cluster, ENSEMBLE, "west-a-0:3181")


def test_ensemble_already_breaking_the_rule_elsewhere_cannot_be_fixed_by_one_swap() -> None:
    cluster = roomy()
    broken = ("east-a-0:3181", "east-b-0:3181", "west-a-0:3181")
    with pytest.raises(EnsembleNotAdheringError) as caught:
        replace(cluster, broken, "west-a-0:3181")
    assert caught.value.code == "ensemble_not_adhering"
    assert "east=2" in str(caught.value)
    assert "start a new ensemble" in str(caught.value)


def test_replacing_the_member_that_breaks_the_rule_repairs_the_ensemble() -> None:
    cluster = roomy()
    broken = ("east-a-0:3181", "east-b-0:3181", "west-a-0:3181")
    replaced = replace(cluster, broken, "east-b-0:3181")
    assert adheres(replaced, cluster, REP_332)
    assert regions_of(replaced, cluster)[1] == "eu"


def test_member_without_a_location_makes_the_ensemble_uncheckable() -> None:
    ensemble = ("east-a-0:3181", "gone:9999", "eu-a-0:3181")
    with pytest.raises(EnsembleNotAdheringError, match="no known location"):
        replace(roomy(), ensemble, "eu-a-0:3181")


def test_replaced_bookie_without_a_location_is_replaced_anywhere_valid() -> None:
    ensemble = ("east-a-0:3181", "gone:9999", "eu-a-0:3181")
    replaced = replace(roomy(), ensemble, "gone:9999")
    assert regions_of(replaced, roomy())[1] == "west"


def test_another_region_goes_to_the_region_holding_the_fewest_copies() -> None:
    # E=W=4, A=3, m=2: at most 2 copies per region. eu's only bookie fails; west (1 copy)
    # and zz (none) would both keep the rule, and zz spreads the ensemble wider, although
    # the preference order (writer's region, then sorted) would reach west first.
    cluster = cluster_of({"east": {"a": 3}, "west": {"a": 2}, "eu": {"a": 1}, "zz": {"a": 1}})
    ensemble = ("east-a-0:3181", "east-a-1:3181", "west-a-0:3181", "eu-a-0:3181")
    replaced = replace(cluster, ensemble, "eu-a-0:3181", Replication(4, 4, 3, 2))
    assert replaced[3] == "zz-a-0:3181"


def test_recently_failed_bookies_are_picked_last_inside_the_rack() -> None:
    cluster = cluster_of({"east": {"a": 1}, "west": {"a": 3}, "eu": {"a": 1}})
    request = ReplaceRequest(
        REP_332, ENSEMBLE, "west-a-0:3181", EAST_A, avoid=frozenset({"west-a-1:3181"})
    )
    assert replace_bookie(request, cluster)[1] == "west-a-2:3181"
