"""with_ensemble: the ensemble history a writer's changes make, never two equal ensembles in
a row (a seeded fault run on a loaded machine wrote [A@0, A@5]: a second change at entry 5
put back the bookie the first had replaced, which had come back meanwhile)."""

from __future__ import annotations

import pytest

from ledger.codecs.entry import DigestType
from ledger.codecs.metadata import Ensemble, LedgerMetadata
from ledger.drivers.context import with_ensemble

pytestmark = pytest.mark.unit

A = ("a:1", "b:1", "c:1")
B = ("d:1", "b:1", "c:1")
C = ("a:1", "e:1", "c:1")


def history(*ensembles: Ensemble) -> LedgerMetadata:
    return LedgerMetadata(3, 3, 2, ensembles, DigestType.CRC32C, b"pw")


def test_a_change_adds_an_ensemble_from_its_first_entry() -> None:
    changed = with_ensemble(history(Ensemble(0, A)), Ensemble(5, B))
    assert changed.ensembles == (Ensemble(0, A), Ensemble(5, B))


def test_a_second_change_at_the_same_entry_replaces_the_last() -> None:
    changed = with_ensemble(history(Ensemble(0, A), Ensemble(5, B)), Ensemble(5, C))
    assert changed.ensembles == (Ensemble(0, A), Ensemble(5, C))


def test_a_second_change_back_to_the_ensemble_before_undoes_the_first() -> None:
    changed = with_ensemble(history(Ensemble(0, A), Ensemble(5, B)), Ensemble(5, A))
    assert changed.ensembles == (Ensemble(0, A),)
    later = with_ensemble(history(Ensemble(0, A), Ensemble(5, B), Ensemble(9, C)), Ensemble(9, B))
    assert later.ensembles == (Ensemble(0, A), Ensemble(5, B))
