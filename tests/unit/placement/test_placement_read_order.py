"""Read order: local rack, local region, remote; failures, slowness and outages move back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement import (
    BookieHealth,
    ClientLocation,
    ClusterView,
    LocatedBookie,
    ReadOrderConfig,
    ReadView,
    read_order,
)
from placement.read_order import Standing, rank_replicas
from tests.unit.placement.placement_clusters import cluster_of

pytestmark = pytest.mark.unit

# BookKeeper's read-order example (docs/placement.md): ensemble
# [b1:/r1/rack1, b2:default, b3:default, b4:/r1/rack2], client in r1, write set = the whole ensemble in that order. BK's "default" location is
# /default-region/default-rack, a region of its own, so b2 and b3 are remote here too.
BK_BOOKIES = (
    LocatedBookie("b1", "r1", "rack1"),
    LocatedBookie("b2", "default-region", "default-rack"),
    LocatedBookie("b3", "default-region", "default-rack"),
    LocatedBookie("b4", "r1", "rack2"),
)
BK_WRITE_SET = ("b1", "b2", "b3", "b4")
NOW_S = 1000.0


def bk_order(
    reader_rack: str | None,
    health: BookieHealth | None = None,
    down: tuple[str, ...] = (),
    read_only: tuple[str, ...] = (),
) -> tuple[str, ...]:
    writable = {b.bookie_id for b in BK_BOOKIES} - set(down) - set(read_only)
    cluster = ClusterView(BK_BOOKIES, frozenset(writable), frozenset(read_only))
    view = ReadView(ClientLocation("r1", reader_rack), cluster, health or BookieHealth(), NOW_S)
    return read_order(BK_WRITE_SET, view)


def test_bk_example_all_up_matches_bookkeeper_when_the_reader_sits_on_rack1() -> None:
    assert bk_order("rack1") == ("b1", "b4", "b2", "b3")  # BK: b1,b4,b2,b3


def test_bk_example_all_up_prefers_the_local_rack_where_bookkeeper_does_not() -> None:
    # Deliberate difference: BK keeps write-set order inside the local region (b1 before b4);
    # globelog puts the reader's own rack first.
    assert bk_order("rack2") == ("b4", "b1", "b2", "b3")  # BK: b1,b4,b2,b3


def test_bk_example_b1_down() -> None:
    assert bk_order("rack1", down=("b1",)) == ("b4", "b2", "b3", "b1")  # BK: same


def test_bk_example_b1_slow() -> None:
    health = BookieHealth()
    health.record_slow("b1", NOW_S - 1)
    assert bk_order("rack1", health) == ("b4", "b2", "b3", "b1")  # BK: same


def test_bk_example_b1_and_b2_slow_rank_by_pending_requests() -> None:
    health = BookieHealth()
    health.record_slow("b1", NOW_S - 1)
    health.record_slow("b2", NOW_S - 1)
    health.set_pending_requests("b1", 1)
    health.set_pending_requests("b2", 2)
    assert bk_order("rack1", health) == ("b4", "b3", "b1", "b2")  # BK: same


def test_bk_example_read_only_then_slow_then_down() -> None:
    health = BookieHealth()
    health.record_slow("b3", NOW_S - 1)
    order = bk_order("rack1", health, down=("b1",), read_only=("b2",))
    assert order == ("b4", "b2", "b3", "b1")  # BK: same


# A wider cluster: the reader sits in east/a.
CLUSTER = cluster_of({"east": {"a": 2, "b": 2}, "west": {"a": 2}, "eu": {"a": 1}})
READER = ClientLocation("east", "a")
RACK = "east-a-0:3181"
RACK_2 = "east-a-1:3181"
REGION = "east-b-0:3181"
REGION_2 = "east-b-1:3181"
WEST = "west-a-0:3181"
WEST_2 = "west-a-1:3181"
EU = "eu-a-0:3181"


def order(
    write_set: tuple[str, ...],
    health: BookieHealth,
    now_s: float = NOW_S,
    cluster: ClusterView = CLUSTER,
    config: ReadOrderConfig | None = None,
) -> tuple[str, ...]:
    view = ReadView(READER, cluster, health, now_s, config or ReadOrderConfig())
    return read_order(write_set, view)


def test_local_rack_then_local_region_then_remote() -> None:
    assert order((WEST, REGION, RACK), BookieHealth()) == (RACK, REGION, WEST)


def test_one_remote_replica_moves_to_position_two_so_the_second_retry_crosses_regions() -> None:
    write_set = (WEST, EU, REGION, REGION_2, RACK)
    assert order(write_set, BookieHealth()) == (RACK, REGION, WEST, REGION_2, EU)


def test_remote_replica_is_second_when_only_one_local_replica_is_healthy() -> None:
    health = BookieHealth()
    health.record_failure(REGION, NOW_S - 5)
    assert order((REGION, RACK, WEST), health) == (RACK, WEST, REGION)


def test_recent_failure_moves_a_local_rack_bookie_behind_healthy_remote_ones() -> None:
    health = BookieHealth()
    health.record_failure(RACK, NOW_S - 10)
    assert order((RACK, REGION, WEST), health) == (REGION, WEST, RACK)


def test_failed_bookies_rank_local_first_then_the_oldest_failure_first() -> None:
    health = BookieHealth()
    health.record_failure(RACK, NOW_S - 1)
    health.record_failure(RACK_2, NOW_S - 30)
    health.record_failure(WEST, NOW_S - 50)
    assert order((WEST, RACK, RACK_2), health) == (RACK_2, RACK, WEST)


def test_demoted_bookie_recovers_once_its_failure_is_older_than_the_ttl() -> None:
    health = BookieHealth()
    health.record_failure(RACK, NOW_S)
    assert order((RACK, WEST), health, now_s=NOW_S + 59.9) == (WEST, RACK)
    assert order((RACK, WEST), health, now_s=NOW_S + 60.0) == (RACK, WEST)


def _samples(health: BookieHealth, bookie_id: str, latency_s: float, at_s: float) -> None:
    for i in range(5):
        health.record_latency(bookie_id, latency_s, at_s + i * 0.01)


def test_bookie_much_slower_than_its_region_peers_is_demoted_then_recovers() -> None:
    health = BookieHealth()
    _samples(health, RACK_2, 0.002, NOW_S)
    _samples(health, REGION, 0.002, NOW_S)
    _samples(health, RACK, 0.030, NOW_S)  # 15x its peers' median
    assert order((RACK, WEST), health, now_s=NOW_S + 1) == (WEST, RACK)
    [rack] = [c for c in rank_replicas((RACK,), ReadView(READER, CLUSTER, health, NOW_S + 1))]
    assert rack.standing is Standing.SLOW
    assert order((RACK, WEST), health, now_s=NOW_S + 61) == (RACK, WEST)


def test_remote_bookies_are_compared_with_their_own_region_not_with_local_latency() -> None:
    health = BookieHealth()
    _samples(health, RACK, 0.001, NOW_S)
    _samples(health, WEST, 0.080, NOW_S)
    _samples(health, WEST_2, 0.085, NOW_S)
    assert order((WEST, EU, RACK), health, now_s=NOW_S + 1) == (RACK, WEST, EU)


def test_latency_above_the_absolute_ceiling_is_slow_even_without_peers() -> None:
    health = BookieHealth()
    _samples(health, EU, 1.5, NOW_S)
    assert order((EU, WEST), health, now_s=NOW_S + 1) == (WEST, EU)


def test_too_few_samples_say_nothing() -> None:
    health = BookieHealth()
    health.record_latency(EU, 9.0, NOW_S)
    assert order((EU, WEST), health, now_s=NOW_S + 1) == (EU, WEST)


def test_pending_request_backlog_demotes_until_it_drains() -> None:
    health = BookieHealth()
    config = ReadOrderConfig(pending_requests_slow=8)
    health.set_pending_requests(RACK, 8)
    assert order((RACK, REGION), health, config=config) == (REGION, RACK)
    health.set_pending_requests(RACK, 7)
    assert order((RACK, REGION), health, config=config) == (RACK, REGION)


def test_read_only_before_slow_before_unavailable_and_unknown_bookies_are_unavailable() -> None:
    cluster = CLUSTER.with_membership(set(CLUSTER.writable) - {REGION, WEST, EU}, read_only={WEST})
    health = BookieHealth()
    health.record_slow(RACK, NOW_S)
    write_set = ("nowhere:1", REGION, RACK, WEST, EU)
    assert order(write_set, health, cluster=cluster) == (WEST, RACK, "nowhere:1", REGION, EU)


@settings(max_examples=100, deadline=None)
@given(
    st.permutations([RACK, RACK_2, REGION, REGION_2, WEST, WEST_2, EU]).map(lambda p: p[:4]),
    st.sets(st.sampled_from([RACK, RACK_2, REGION, REGION_2, WEST, WEST_2, EU])),
    st.sets(st.sampled_from([RACK, RACK_2, REGION, REGION_2, WEST, WEST_2, EU])),
)
def test_order_is_a_permutation_and_healthy_local_replicas_lead(
    write_set: list[str], failed: set[str], down: set[str]
) -> None:
    health = BookieHealth()
    for bookie_id in failed:
        health.record_failure(bookie_id, NOW_S)
    cluster = CLUSTER.with_membership(set(CLUSTER.writable) - down, ())
    result = order(tuple(write_set), health, cluster=cluster)
    assert sorted(result) == sorted(write_set)
    healthy_local = [
        b for b in write_set if b.startswith("east") and b not in failed and b not in down
    ]
    if healthy_local:
        assert result[0] in healthy_local
        if RACK in healthy_local or RACK_2 in healthy_local:
            assert cluster.by_id[result[0]].rack == "a"
