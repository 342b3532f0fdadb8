"""Property tests: placement keeps the rules on random clusters and fails only when it must."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from core.durability import ensemble_violations
from placement import (
    Adherence,
    EnsembleNotAdheringError,
    EnsembleRequest,
    LocatedBookie,
    NotEnoughBookiesError,
    QuorumSettingsError,
    ReplaceRequest,
    audit_ensemble,
    new_ensemble,
    replace_bookie,
)
from placement.replace import FRESH_REGION
from tests.unit.placement.placement_clusters import (
    Scenario,
    adheres,
    brute_force_exists,
    brute_force_exists_anywhere,
    rack_spread_ok,
    scenarios,
)

pytestmark = pytest.mark.unit

EXAMPLES = 250
FAST = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _request(s: Scenario) -> EnsembleRequest:
    return EnsembleRequest(s.replication, s.writer, s.excluded, s.rotation)


@FAST
@given(scenarios())
def test_new_ensemble_keeps_the_rules_or_no_valid_ensemble_exists(s: Scenario) -> None:
    usable = s.usable()
    try:
        ensemble = new_ensemble(_request(s), s.cluster)
    except QuorumSettingsError:
        event("quorum settings error")
        # A settings error claims that no cluster of these regions could ever work.
        assert not brute_force_exists_anywhere(len(s.cluster.regions), s.replication)
        return
    except NotEnoughBookiesError:
        event("not enough bookies")
        assert not brute_force_exists(usable, s.replication)
        return
    event(f"placed over {len({b.region for b in ensemble})} region(s)")
    ids = [b.bookie_id for b in ensemble]
    assert len(ids) == s.replication.ensemble_size
    assert len(set(ids)) == len(ids)
    assert set(ensemble) <= set(usable)
    assert adheres(ids, s.cluster, s.replication)
    assert rack_spread_ok(ids, usable)


@FAST
@given(scenarios())
def test_new_ensemble_starts_in_the_writers_region_whenever_some_valid_ensemble_uses_it(
    s: Scenario,
) -> None:
    try:
        ensemble = new_ensemble(_request(s), s.cluster)
    except (QuorumSettingsError, NotEnoughBookiesError):
        return
    if ensemble[0].region != s.writer.region:
        assert not brute_force_exists(s.usable(), s.replication, must_include=s.writer.region)


@FAST
@given(scenarios())
def test_new_ensemble_is_strictly_rack_spread_when_each_region_has_racks_to_spare(
    s: Scenario,
) -> None:
    try:
        ensemble = new_ensemble(_request(s), s.cluster)
    except (QuorumSettingsError, NotEnoughBookiesError):
        return
    usable = s.usable()
    copies = Counter(b.region for b in ensemble)
    racks = {r: len({b.rack for b in usable if b.region == r}) for r in copies}
    report = audit_ensemble(
        [b.bookie_id for b in ensemble],
        usable,
        s.replication.write_quorum,
        s.replication.ack_quorum,
        s.replication.min_regions_for_durability,
    )
    assert report.adheres
    if all(copies[r] <= racks[r] for r in copies):
        assert report.adherence is Adherence.MEETS_STRICT, report.describe()


@FAST
@given(scenarios(), st.data())
def test_replace_keeps_the_rules_prefers_locality_or_no_valid_replacement_exists(
    s: Scenario, data: st.DataObject
) -> None:
    rep = s.replication
    ids = [b.bookie_id for b in s.cluster.bookies]
    assume(len(ids) >= rep.ensemble_size)
    ensemble = tuple(data.draw(st.permutations(ids))[: rep.ensemble_size])
    index = data.draw(st.integers(0, rep.ensemble_size - 1))
    request = ReplaceRequest(rep, ensemble, ensemble[index], s.writer, s.excluded, s.rotation)
    candidates = s.cluster.usable(set(s.excluded) | set(ensemble))
    valid = [c for c in candidates if adheres(_swap(ensemble, index, c.bookie_id), s.cluster, rep)]
    try:
        replaced = replace_bookie(request, s.cluster)
    except QuorumSettingsError:
        event("quorum settings error")
        assert not brute_force_exists_anywhere(len(s.cluster.regions), rep)
        return
    except EnsembleNotAdheringError:
        event("ensemble not adhering")
        labels = [s.cluster.by_id[b].region for b in ensemble]
        labels[index] = FRESH_REGION
        assert ensemble_violations(
            labels, rep.write_quorum, rep.ack_quorum, rep.min_regions_for_durability
        )
        assert not valid
        return
    except NotEnoughBookiesError:
        event("not enough bookies")
        assert not valid
        return
    chosen = s.cluster.by_id[replaced[index]]
    failed = s.cluster.by_id[ensemble[index]]
    event(
        "same rack"
        if (chosen.region, chosen.rack) == (failed.region, failed.rack)
        else "same region"
        if chosen.region == failed.region
        else "other region"
    )
    assert replaced == _swap(ensemble, index, chosen.bookie_id)
    assert chosen in valid
    _check_preference(s, ensemble, index, chosen, valid)


def _swap(ensemble: tuple[str, ...], index: int, bookie_id: str) -> tuple[str, ...]:
    return (*ensemble[:index], bookie_id, *ensemble[index + 1 :])


def _check_preference(
    s: Scenario,
    ensemble: tuple[str, ...],
    index: int,
    chosen: LocatedBookie,
    valid: list[LocatedBookie],
) -> None:
    failed = s.cluster.by_id[ensemble[index]]
    same_rack = [c for c in valid if (c.region, c.rack) == (failed.region, failed.rack)]
    same_region = [c for c in valid if c.region == failed.region]
    if same_rack:
        assert (chosen.region, chosen.rack) == (failed.region, failed.rack)
        return
    if same_region:
        assert chosen.region == failed.region
    else:
        # Another region: the one holding the fewest of the remaining copies.
        others = Counter(s.cluster.by_id[b].region for i, b in enumerate(ensemble) if i != index)
        assert others[chosen.region] == min(others[c.region] for c in valid)
    # Rack spread: no valid candidate of that region sits on a less used rack.
    used = Counter(
        s.cluster.by_id[b].rack
        for i, b in enumerate(ensemble)
        if i != index and s.cluster.by_id[b].region == chosen.region
    )
    assert used[chosen.rack] == min(used[c.rack] for c in valid if c.region == chosen.region)


@FAST
@given(
    st.lists(st.sampled_from(["a:1", "b:1", "c:1", "d:1", "e:1", "zz:9"]), min_size=1, max_size=6),
    st.integers(-1, 7),
    st.integers(-1, 7),
    st.integers(0, 4),
)
def test_audit_agrees_with_the_core_rule_and_never_crashes(
    ensemble: list[str], write: int, ack: int, min_regions: int
) -> None:
    where = [
        LocatedBookie("a:1", "east", "k1"),
        LocatedBookie("b:1", "east", "k2"),
        LocatedBookie("c:1", "west", "k1"),
        LocatedBookie("d:1", "west", "k1"),
        LocatedBookie("e:1", "eu", "k1"),
    ]  # zz:9 has no known location
    report = audit_ensemble(ensemble, where, write, ack, min_regions)
    assert report.describe().startswith("ensemble ")
    well_formed = 1 <= ack <= write <= len(ensemble) and min_regions >= 1
    known = all(b != "zz:9" for b in ensemble) and len(set(ensemble)) == len(ensemble)
    if well_formed and known:
        regions = {b.bookie_id: b.region for b in where}
        core = ensemble_violations([regions[b] for b in ensemble], write, ack, min_regions)
        assert [w.first_entry for w in report.durability] == [v.first_entry_index for v in core]
        assert report.adheres == (not core)
    else:
        assert not report.adheres
