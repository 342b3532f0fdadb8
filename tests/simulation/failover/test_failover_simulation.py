"""The deterministic simulation of the write/read path (verify.sim), judged by the failover
checker: a batch of seeds must pass, a seed must replay exactly, and deliberately broken
machines (tests/simulation/failover/broken.py) must be caught within a bounded number of
seeds. GLOBELOG_SIM_SEEDS sets the batch (default 120; `globelog failover simulate` runs
thousands). A failing seed replays alone: globelog failover simulate --first N --seeds 1.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from tests.simulation.failover.broken import BROKEN
from verify.sim.nemesis import FAULT_KINDS
from verify.sim.run import SimConfig, SimResult, simulate

SEEDS = int(os.environ.get("GLOBELOG_SIM_SEEDS", "120"))
CHUNK = 20
BROKEN_SEEDS_MAX = 80  # a broken variant must be caught within this many seeds


def _describe(result: SimResult) -> str:
    bad = [a.describe() for a in result.report.anomalies if a.kind != "duplicate-plain"]
    return (
        f"seed {result.seed}: {bad[:3]} {result.unfinished[:3]} — replay: "
        f"globelog failover simulate --first {result.seed} --seeds 1 --jobs 1"
    )


@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK), ids=lambda s: f"seeds_{s}")
def test_every_seed_keeps_every_guarantee_and_finishes(first: int) -> None:
    failed = []
    for seed in range(first, min(first + CHUNK, SEEDS)):
        result = simulate(seed)
        if not result.ok:
            failed.append(_describe(result))
    assert not failed, "\n".join(failed)


def test_a_seed_replays_exactly() -> None:
    first, again = simulate(5), simulate(5)
    assert first.history_lines() == again.history_lines()
    assert first.events == again.events
    assert simulate(6).history_lines() != first.history_lines()


def test_the_batch_reaches_every_fault_kind_and_real_work() -> None:
    faults: Counter[str] = Counter()
    acknowledged = plain_duplicates = segments = 0
    for seed in range(min(SEEDS, 40)):
        result = simulate(seed)
        faults.update(str(op.fault) for op in result.history if op.f == "fault")
        acknowledged += sum(1 for op in result.history if op.f == "send" and op.type == "ok")
        plain_duplicates += result.report.counts()["duplicate-plain"]
        segments += sum(1 for op in result.history if op.f == "audit")
    assert set(faults) == set(FAULT_KINDS), faults
    assert acknowledged > 40 * 50, acknowledged
    assert segments > 40 * 2 * 2, "streams roll and change owner: several segments each"
    assert plain_duplicates > 0, "plain retries across failures do land twice (allowed)"


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("acks-at-one-copy", {"durability", "fenced-ack", "lost"}),
        ("skips-fencing", {"fenced-ack", "lost"}),
        ("forgets-producers", {"duplicate-idempotent"}),
    ],
)
def test_a_broken_machine_is_caught(variant: str, expected: set[str]) -> None:
    config = SimConfig(machines=BROKEN[variant])
    for seed in range(BROKEN_SEEDS_MAX):
        result = simulate(seed, config)
        found = {kind for kind, count in result.report.counts().items() if count}
        if found & expected:
            assert not result.report.valid
            return
    pytest.fail(f"{variant}: none of {sorted(expected)} within {BROKEN_SEEDS_MAX} seeds")


def test_the_correct_machines_pass_the_seeds_that_catch_the_broken_ones() -> None:
    """The seeds that catch each variant pass with the product's machines: the anomaly is
    the variant's, not the scenario's."""
    for variant in BROKEN:
        config = SimConfig(machines=BROKEN[variant])
        catching = next(
            seed for seed in range(BROKEN_SEEDS_MAX) if not simulate(seed, config).report.valid
        )
        assert simulate(catching).ok, variant
