"""New ensembles on hand-built clusters: spread, order, rotation, degraded modes, and errors."""

from __future__ import annotations

from collections import Counter

import pytest

from core.durability import write_set
from core.topology import Replication
from placement import (
    ClientLocation,
    ClusterView,
    EnsembleRequest,
    NotEnoughBookiesError,
    QuorumSettingsError,
    new_ensemble,
)
from tests.unit.placement.placement_clusters import adheres, cluster_of, regions_of, three_regions

pytestmark = pytest.mark.unit

EAST_A = ClientLocation("east", "a")


def place(
    cluster: ClusterView,
    replication: Replication,
    writer: ClientLocation = EAST_A,
    excluded: frozenset[str] = frozenset(),
    rotation: int = 0,
) -> list[str]:
    request = EnsembleRequest(replication, writer, excluded, rotation)
    return [b.bookie_id for b in new_ensemble(request, cluster)]


def racks_of(ensemble: list[str], cluster: ClusterView) -> list[str]:
    return [cluster.by_id[b].location for b in ensemble]


def test_3_3_2_puts_one_copy_per_region_and_the_writer_rack_first() -> None:
    cluster = three_regions()
    ensemble = place(cluster, Replication(3, 3, 2, 2))
    assert ensemble[0] == "east-a-0:3181"
    assert sorted(regions_of(ensemble, cluster)) == ["east", "eu", "west"]


def test_rotation_spreads_the_non_local_regions_between_ledgers() -> None:
    cluster = three_regions()
    rep = Replication(2, 2, 2, 2)  # two regions out of three: rotation picks the second one
    seconds = {regions_of(place(cluster, rep, rotation=r), cluster)[1] for r in range(4)}
    assert seconds == {"west", "eu"}


def test_6_6_4_puts_two_copies_per_region_on_different_racks() -> None:
    cluster = three_regions()
    ensemble = place(cluster, Replication(6, 6, 4, 2))
    assert Counter(regions_of(ensemble, cluster)) == {"east": 2, "west": 2, "eu": 2}
    assert len(set(racks_of(ensemble, cluster))) == 6


def test_positions_interleave_regions_so_every_write_set_spans_all_regions() -> None:
    cluster = three_regions(per_rack=2)
    rep = Replication(9, 3, 2, 2)
    ensemble = place(cluster, rep)
    regions = regions_of(ensemble, cluster)
    for entry in range(9):
        assert len({regions[p] for p in write_set(entry, 9, 3)}) == 3
    assert adheres(ensemble, cluster, rep)


def test_a_region_with_one_rack_still_spreads_over_the_other_regions_racks() -> None:
    cluster = cluster_of({"east": {"a": 3}, "west": {"a": 1, "b": 1, "c": 1}})
    ensemble = place(cluster, Replication(4, 4, 3, 2))
    west = [cluster.by_id[b].rack for b in ensemble if cluster.by_id[b].region == "west"]
    assert len(west) == len(set(west)) == 2


def test_region_down_still_places_3_plus_3_as_bookkeeper_section_2_5() -> None:
    # 3 regions, m=2, E=W=6, A=4, one region dead: 3 + 3 is allowed since 3 <= A - 1.
    cluster = three_regions(per_rack=2)
    dead = {b.bookie_id for b in cluster.bookies if b.region == "eu"}
    cluster = cluster.with_membership(set(cluster.writable) - dead, ())
    ensemble = place(cluster, Replication(6, 6, 4, 2))
    assert Counter(regions_of(ensemble, cluster)) == {"east": 3, "west": 3}


def test_drained_region_gets_no_new_copies() -> None:
    cluster = three_regions(per_rack=2).with_drained("west", drained=True)
    ensemble = place(cluster, Replication(6, 6, 4, 2))
    assert "west" not in regions_of(ensemble, cluster)


def test_all_bookies_of_a_rack_down_uses_the_other_racks() -> None:
    cluster = cluster_of({"east": {"a": 2, "b": 2}, "west": {"a": 2, "b": 2}})
    rack_a_east = {"east-a-0:3181", "east-a-1:3181"}
    cluster = cluster.with_membership(set(cluster.writable) - rack_a_east, ())
    ensemble = place(cluster, Replication(4, 4, 3, 2))
    assert not rack_a_east & set(ensemble)
    assert Counter(regions_of(ensemble, cluster)) == {"east": 2, "west": 2}


def test_3_3_2_with_a_region_down_is_not_enough_bookies_naming_regions_and_counts() -> None:
    cluster = three_regions()
    cluster = cluster.with_membership(
        {b.bookie_id for b in cluster.bookies if b.region != "west"}, ("west-a-0:3181",)
    )
    with pytest.raises(NotEnoughBookiesError) as caught:
        place(cluster, Replication(3, 3, 2, 2))
    error = caught.value
    assert error.code == "not_enough_bookies"
    assert error.retriable is True
    assert "needs copies in at least 3 region(s)" in error.constraint
    assert "only 2 region(s) have usable bookies ['east', 'eu']" in error.constraint
    assert "west: 0 usable (a=0, b=0), 1 down, 1 read-only" in error.availability


def test_too_few_usable_bookies_says_how_many_and_why_the_rest_are_unusable() -> None:
    cluster = three_regions().with_drained("eu", drained=True)
    with pytest.raises(NotEnoughBookiesError) as caught:
        place(cluster, Replication(4, 4, 3, 2), excluded=frozenset({"west-b-0:3181"}))
    error = caught.value
    assert "needs 4 distinct writable bookies" in error.constraint
    assert "found 3" in error.constraint
    assert "eu: drained (2 bookie(s), none usable)" in error.availability
    assert "west: 1 usable (a=1, b=0), 1 excluded" in error.availability


def test_lopsided_capacity_reports_that_no_order_separates_the_copies() -> None:
    # Windows of 2 need 2 regions, but 4 positions with one lone west bookie cannot avoid two
    # east copies next to each other.
    cluster = cluster_of({"east": {"a": 4}, "west": {"a": 1}, "eu": {"a": 1}}).with_drained(
        "eu", drained=True
    )
    with pytest.raises(NotEnoughBookiesError) as caught:
        place(cluster, Replication(4, 2, 2, 2))
    assert "no order of 4 positions" in caught.value.constraint
    assert "east=4, west=1" in caught.value.constraint


def test_invalid_settings_raise_the_quorum_error_before_looking_at_bookies() -> None:
    with pytest.raises(QuorumSettingsError, match="smallest valid ack_quorum is 2"):
        place(three_regions(), Replication(3, 3, 1, 2))


def test_unknown_writer_region_still_places_over_all_regions() -> None:
    cluster = three_regions()
    ensemble = place(cluster, Replication(3, 3, 2, 2), writer=ClientLocation("mars"))
    assert sorted(regions_of(ensemble, cluster)) == ["east", "eu", "west"]


def test_bookies_in_avoid_are_picked_last_inside_their_rack() -> None:
    cluster = cluster_of({"east": {"a": 2}, "west": {"a": 2}})
    request = EnsembleRequest(
        Replication(2, 2, 2, 2), EAST_A, avoid=frozenset({"east-a-0:3181", "west-a-0:3181"})
    )
    ensemble = [b.bookie_id for b in new_ensemble(request, cluster)]
    assert ensemble == ["east-a-1:3181", "west-a-1:3181"]


def test_writable_bookies_missing_from_the_topology_are_named_in_the_error() -> None:
    cluster = three_regions().with_membership({"stranger:1", "east-a-0:3181"}, ())
    with pytest.raises(NotEnoughBookiesError) as caught:
        place(cluster, Replication(3, 3, 2, 2))
    assert "writable but not in the topology (ignored): ['stranger:1']" in caught.value.availability
