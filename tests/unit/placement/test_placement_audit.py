"""Adherence audit: every violating write set is listed with a sentence; racks are advisory."""

from __future__ import annotations

import pytest

from placement import Adherence, audit_ensemble
from tests.unit.placement.placement_clusters import cluster_of

pytestmark = pytest.mark.unit

CLUSTER = cluster_of({r: {"a": 2, "b": 2} for r in ("east", "west", "eu")})


def test_one_copy_per_region_meets_strict() -> None:
    report = audit_ensemble(
        ("east-a-0:3181", "west-a-0:3181", "eu-a-0:3181"), CLUSTER.by_id, 3, 2, 2
    )
    assert report.adherence is Adherence.MEETS_STRICT
    assert report.adheres
    assert "every write set's ack quorums span >= 2 region(s)" in report.describe()


def test_bookkeeper_would_say_adheres_but_two_copies_in_one_region_fail_3_3_2() -> None:
    ensemble = ("east-a-0:3181", "east-b-0:3181", "west-a-0:3181")
    report = audit_ensemble(ensemble, CLUSTER.by_id, 3, 2, 2)
    assert report.adherence is Adherence.FAIL
    [finding] = report.durability
    assert finding.positions == (0, 1, 2)
    assert finding.bookies == ensemble
    assert "every entry" in finding.sentence
    assert "east=2, west=1: 1 region(s) could form ack_quorum=2 alone" in finding.sentence


def test_each_violating_window_of_a_striped_ensemble_is_listed() -> None:
    # E=4, W=2: windows [0,1] [1,2] [2,3] [3,0]; the first two hold two east copies each.
    ensemble = ("east-a-0:3181", "east-b-0:3181", "east-a-1:3181", "west-a-0:3181")
    report = audit_ensemble(ensemble, CLUSTER.by_id, 2, 2, 2)
    assert [w.positions for w in report.durability] == [(0, 1), (1, 2)]
    assert report.durability[1].sentence.startswith("entries 1, 5, ...")
    text = report.describe()
    assert text.count("could form ack_quorum=2 alone") == 2


def test_two_copies_of_a_write_set_on_one_rack_is_a_soft_finding() -> None:
    # E=6, W=3, A=3: two east copies per write set are allowed, but write sets [0,1,2] and
    # [5,0,1] keep both on east/a although the ensemble also uses east/b.
    ensemble = (
        "east-a-0:3181",
        "east-a-1:3181",
        "west-a-0:3181",
        "east-b-0:3181",
        "west-b-0:3181",
        "eu-a-0:3181",
    )
    report = audit_ensemble(ensemble, CLUSTER.by_id, 3, 3, 2)
    assert report.adheres
    assert report.adherence is Adherence.MEETS_SOFT
    assert report.racks == (
        "write set [0, 1, 2] keeps 2 copies on east/a while the ensemble also uses east rack(s) "
        "['b']",
        "write set [5, 0, 1] keeps 2 copies on east/a while the ensemble also uses east rack(s) "
        "['b']",
    )
    assert "(rack spread) write set [0, 1, 2]" in report.describe()


def test_region_crowding_one_rack_while_another_rack_is_free_is_a_soft_finding() -> None:
    ensemble = ("east-a-0:3181", "west-a-0:3181", "east-a-1:3181", "west-b-0:3181")
    report = audit_ensemble(ensemble, CLUSTER.by_id, 2, 2, 2)
    assert report.adherence is Adherence.MEETS_SOFT
    assert report.racks == (
        "east holds {'a': 2} per rack; its racks {'a': 2, 'b': 2} allow at most 1 per rack "
        "over more racks",
    )


def test_unknown_bookie_and_duplicates_fail_with_reasons() -> None:
    ensemble = ("east-a-0:3181", "gone:9999", "east-a-0:3181")
    report = audit_ensemble(ensemble, CLUSTER.by_id, 3, 2, 2)
    assert report.adherence is Adherence.FAIL
    assert any("holds positions [0, 2]" in p for p in report.problems)
    assert any("['gone:9999'] have no known region/rack" in p for p in report.problems)


def test_unknown_bookie_fails_every_window_it_is_in() -> None:
    ensemble = ("east-a-0:3181", "west-a-0:3181", "eu-a-0:3181", "gone:9999")
    report = audit_ensemble(ensemble, CLUSTER.by_id, 2, 2, 2)
    assert [w.positions for w in report.durability] == [(2, 3), (3, 0)]
    assert "cannot be checked" in report.durability[0].sentence


def test_bad_quorum_in_metadata_is_reported_not_raised() -> None:
    report = audit_ensemble(("east-a-0:3181",), CLUSTER.by_id, 3, 2, 2)
    assert report.adherence is Adherence.FAIL
    assert "ack_quorum <= write_quorum <= ensemble size" in report.describe()


def test_locations_may_be_given_as_located_bookies() -> None:
    ensemble = ("east-a-0:3181", "west-a-0:3181", "eu-a-0:3181")
    assert audit_ensemble(ensemble, CLUSTER.bookies, 3, 2, 2).adherence is Adherence.MEETS_STRICT
