"""PlacementState through the interface the ledger client uses, on a parsed topology."""

from __future__ import annotations

from collections import Counter

import pytest

from core.topology import Replication
from core.topology_loader import parse_topology
from placement import (
    Adherence,
    ClientLocation,
    NotEnoughBookiesError,
    PlacementConfig,
    PlacementPolicy,
    PlacementState,
    UnknownRegionError,
)

pytestmark = pytest.mark.unit

TOPOLOGY = """
name: three-regions-two-racks
replication: {ensemble_size: 3, write_quorum: 3, ack_quorum: 2, min_regions_for_durability: 2}
zookeeper:
  - {name: zk-east, region: east, client_port: 2181, peer_port: 2888, election_port: 3888}
regions:
  - name: east
    racks:
      - {name: a, bookies: [{name: e-a1, port: 3181}, {name: e-a2, port: 3182}]}
      - {name: b, bookies: [{name: e-b1, port: 3183}]}
    write_proxies: [{name: wp-east, port: 8101}]
    read_proxies: [{name: rp-east, port: 8201}]
  - name: west
    racks:
      - {name: a, bookies: [{name: w-a1, port: 3184}]}
      - {name: b, bookies: [{name: w-b1, port: 3185}]}
    write_proxies: [{name: wp-west, port: 8102}]
    read_proxies: [{name: rp-west, port: 8202}]
  - name: eu
    racks:
      - {name: a, bookies: [{name: u-a1, port: 3186}]}
      - {name: b, bookies: [{name: u-b1, port: 3187}]}
    write_proxies: [{name: wp-eu, port: 8103}]
    read_proxies: [{name: rp-eu, port: 8203}]
wan:
  toxiproxy: {api_port: 8474}
  listen_port_base: 21000
  default_profile: ci
  profiles:
    ci:
      - {between: [east, west], one_way_ms: 4, jitter_ms: 0}
      - {between: [east, eu], one_way_ms: 4, jitter_ms: 0}
      - {between: [west, eu], one_way_ms: 6, jitter_ms: 0}
"""
TOPO = parse_topology(TOPOLOGY)
REP = TOPO.replication
E_A1, E_A2, E_B1 = "127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183"
W_A1, W_B1, U_A1, U_B1 = "127.0.0.1:3184", "127.0.0.1:3185", "127.0.0.1:3186", "127.0.0.1:3187"


def state() -> PlacementState:
    return PlacementState.from_topology(TOPO, PlacementConfig(ClientLocation("east", "a")))


def regions(s: PlacementState, ensemble: tuple[str, ...]) -> list[str]:
    return [s.cluster.by_id[b].region for b in ensemble]


def test_state_implements_the_protocol_the_ledger_client_uses() -> None:
    policy: PlacementPolicy = state()  # checked by mypy when the tests are type-checked
    ensemble = policy.new_ensemble(REP)
    assert len(ensemble) == 3


def test_consecutive_ensembles_rotate_the_remote_regions() -> None:
    s = state()
    seconds = Counter(regions(s, s.new_ensemble(Replication(2, 2, 2, 2)))[1] for _ in range(4))
    assert seconds == {"west": 2, "eu": 2}


def test_recent_failures_are_avoided_when_the_rack_has_another_bookie() -> None:
    s = state()
    # Rotation alternates the two bookies of rack east/a from one ensemble to the next...
    assert [s.new_ensemble(REP, now_s=1.0)[0] for _ in range(2)] == [E_A1, E_A2]
    s.record_failure(E_A1, 10.0)
    # ...until one of them fails: then the other one is picked every time,
    assert [s.new_ensemble(REP, now_s=11.0)[0] for _ in range(2)] == [E_A2, E_A2]
    # and the failed one returns once its failure has expired.
    assert [s.new_ensemble(REP, now_s=71.0)[0] for _ in range(2)] == [E_A1, E_A2]


# E/W/A 4/4/3 over two copies in two regions each survives any one region (2/2)
SURVIVOR = Replication(4, 4, 3, 2)


def test_a_replacement_skips_a_region_mate_that_just_failed_too() -> None:
    """A region killed whole: its bookies stay registered until their sessions expire. The
    copy lost with one must not go to the other (dead as well) and back again."""
    s = state()
    ensemble = (E_A1, E_B1, W_A1, U_A1)
    s.record_failure(W_A1, 10.0)
    s.record_failure(W_B1, 10.5)
    replaced = s.replace_bookie(SURVIVOR, ensemble, W_A1, excluded={W_A1}, now_s=11.0)
    assert replaced[2] not in (W_A1, W_B1)
    assert s.audit(replaced, SURVIVOR).adherence is not Adherence.FAIL
    # without the failures, the same-region preference holds
    fresh = state().replace_bookie(SURVIVOR, ensemble, W_A1, excluded={W_A1}, now_s=11.0)
    assert fresh[2] == W_B1


def test_recently_failed_bookies_are_used_when_nothing_else_can_hold_the_copy() -> None:
    s = state()
    for bookie in (E_A2, E_B1, W_B1, U_A1, U_B1):
        s.record_failure(bookie, 10.0)
    # only E_A1 and W_A1 are healthy; a third copy must go to a recently failed bookie
    ensemble = s.new_ensemble(REP, now_s=11.0)
    assert {E_A1, W_A1} <= set(ensemble)
    assert s.audit(ensemble, REP).adherence is not Adherence.FAIL


def test_new_ensembles_leave_out_recently_failed_bookies_while_others_can_serve() -> None:
    s = state()
    s.record_failure(W_A1, 10.0)
    s.record_failure(W_B1, 10.0)
    for _ in range(4):
        ensemble = s.new_ensemble(SURVIVOR, now_s=11.0)
        assert not {W_A1, W_B1} & set(ensemble)
        assert s.audit(ensemble, SURVIVOR).adherence is not Adherence.FAIL


def test_membership_updates_feed_placement_and_reads() -> None:
    s = state()
    everyone = {b.bookie_id for b in s.cluster.bookies}
    s.update_membership(everyone - {W_A1, W_B1}, read_only=())
    with pytest.raises(NotEnoughBookiesError, match="west: 0 usable"):
        s.new_ensemble(REP)
    order = s.read_order((W_A1, U_A1, E_B1), now_s=5.0)
    assert order == (E_B1, U_A1, W_A1)
    assert s.speculative_delays((W_A1, U_A1), now_s=5.0) == pytest.approx((0.002,))


def test_observations_drive_read_order_and_delays() -> None:
    s = state()
    for i in range(5):
        s.record_latency(E_B1, 0.004, 1.0 + i)
    s.record_failure(E_A1, 5.0)
    s.set_pending_requests(U_A1, 2)
    assert s.read_order((E_A1, E_B1, U_A1), now_s=6.0) == (E_B1, U_A1, E_A1)
    assert s.speculative_delays((E_B1, U_A1, E_A1), now_s=6.0) == pytest.approx((0.006, 0.1))
    s.record_slow(E_B1, 6.0)
    assert s.read_order((E_A1, E_B1, U_A1), now_s=7.0)[0] == U_A1


def test_draining_a_region_moves_copies_out_through_replacements() -> None:
    s = state()
    ensemble = s.new_ensemble(Replication(3, 3, 2, 2))
    s.drain_region("west")
    movers = s.members_to_move(ensemble)
    assert [s.cluster.by_id[b].region for b in movers] == ["west"]
    # With west drained only east and eu remain: one copy cannot leave without east or eu
    # holding two of three copies, so the replacement is refused and says why.
    with pytest.raises(NotEnoughBookiesError, match="west is drained"):
        s.replace_bookie(REP, ensemble, movers[0])
    wider = Replication(4, 4, 3, 2)
    ensemble = s.new_ensemble(wider)
    assert "west" not in regions(s, ensemble)
    s.drain_region("west", drained=False)
    assert s.members_to_move(ensemble) == ()


def test_replacement_through_the_state_keeps_the_rule() -> None:
    s = state()
    ensemble = s.new_ensemble(REP)
    failed = ensemble[1]
    replaced = s.replace_bookie(REP, ensemble, failed, now_s=1.0)
    assert replaced[1] != failed
    assert s.audit(replaced, REP).adherence is Adherence.MEETS_STRICT


def test_draining_an_unknown_region_is_a_clear_error() -> None:
    with pytest.raises(UnknownRegionError, match="no region 'mars'") as caught:
        state().drain_region("mars")
    assert caught.value.code == "unknown_region"


def test_an_ensemble_placed_while_a_region_was_away_spreads_back_over_it() -> None:
    """Placed with west down, a 4-copy ensemble is two in east and two in eu. Once west's
    bookies are usable and answer, one eu copy (the crowded region that is not the
    client's) is to move, and the replacement with that region avoided lands in west."""
    s = state()
    wider = Replication(4, 4, 3, 2)
    everyone = {b.bookie_id for b in s.cluster.bookies}
    s.update_membership(everyone - {W_A1, W_B1}, read_only=())
    ensemble = s.new_ensemble(wider)
    assert sorted(regions(s, ensemble)) == ["east", "east", "eu", "eu"]
    assert s.member_to_spread(ensemble, lambda b: True) is None  # west still down
    s.update_membership(everyone, read_only=())
    assert s.member_to_spread(ensemble, lambda b: b not in (W_A1, W_B1)) is None  # silent
    mover = s.member_to_spread(ensemble, lambda b: True)
    assert mover is not None and s.cluster.by_id[mover].region == "eu"
    moved = s.replace_bookie(wider, ensemble, mover, excluded={mover}, avoid_regions={"eu"})
    assert sorted(regions(s, moved)) == ["east", "east", "eu", "west"]
    assert s.audit(moved, wider).adherence is not Adherence.FAIL
    assert s.member_to_spread(moved, lambda b: True) is None  # spread as far as it goes
    s.drain_region("west")
    assert s.member_to_spread(ensemble, lambda b: True) is None  # no new copy into a drain


def test_the_clients_own_region_gives_a_copy_only_when_it_is_the_most_crowded() -> None:
    s = state()
    east_heavy = (E_A1, E_B1, E_A2, U_A1)
    mover = s.member_to_spread(east_heavy, lambda b: True)
    assert mover == E_A2, "rack a holds two of east's three copies: one of those moves"
    assert s.member_to_spread((E_A1, "10.0.0.9:3181", U_A1), lambda b: True) is None  # unknown


def test_an_answer_after_a_failure_ends_the_silence_without_teaching_latency() -> None:
    s = state()
    s.record_failure(W_A1, 10.0)
    assert s.silent_since_failure_s(W_A1, 11.0) == 10.0
    assert not s.answered_lately(W_A1, 11.0, within_s=5.0)
    s.record_answer(W_A1, 12.0)  # a probe's answer
    assert s.silent_since_failure_s(W_A1, 13.0) is None
    assert s.answered_lately(W_A1, 13.0, within_s=5.0)
    assert not s.answered_lately(W_A1, 18.0, within_s=5.0), "an answer long ago is no evidence"
    assert s.health.latencies_s(W_A1, 13.0) == ()
    s.record_failure(W_A1, 14.0)  # failed again after that answer: silent again
    assert s.silent_since_failure_s(W_A1, 15.0) == 14.0
    assert not s.answered_lately(W_A1, 15.0, within_s=5.0)
    assert not s.answered_lately(W_B1, 15.0, within_s=5.0)  # never asked: no evidence
    s.record_latency(W_B1, 0.004, 16.0)
    assert s.answered_lately(W_B1, 17.0, within_s=5.0)
