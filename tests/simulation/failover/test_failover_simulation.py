"""The failover run on the simulated world (verify/sim/run.py: globelog's own proxies,
rebuilders, drivers, writers and readers over simulated network, ZooKeeper, bookies and
clock), judged by the failover checker: a batch of seeds keeps every guarantee, a seed
replays to the byte (in another process, under another hash seed too), the replay of a
failing seed shows the smallest history the checker rejects, and the seeds where the
simulation found bugs in production code pass now (each named with what it found).
GLOBELOG_SIM_SEEDS sets the batch (default 6; `globelog failover simulate` runs thousands).
A failing seed replays alone: globelog failover simulate --seed N --trace."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections import Counter

import pytest

from core import runtime
from tests.support.sim_thread import under_hash_seeds
from verify.minimize import minimal_history
from verify.sim.run import SIM_FAULT_KINDS, SimConfig, SimResult, faults_of, simulate

SEEDS = int(os.environ.get("GLOBELOG_SIM_SEEDS", "6"))
CAUGHT_WITHIN = 6  # seeds the failover run takes to catch a broken guarantee
# Seeds that found a bug in production code; each passes since its fix.
FOUND = {
    # A read proxy's page from before its read-ahead read by a reader of its own answered
    # "nothing yet" after wait_ms while records existed (opening and reading the first record
    # on far bookies took longer): a client asking again with the same wait never progressed.
    1: "region/read_proxy.py, reader/log_reader.py read_next_written",
    # The same page's reader, before asking any bookie for the LAC, took itself to be at the
    # end of an in-progress segment, so the page waited only wait_ms, for ever.
    3: "reader/log_reader.py _read_ledger reads the LAC first",
    5: "reader/log_reader.py _read_ledger reads the LAC first",
}


def _describe(result: SimResult) -> str:
    bad = [a.describe() for a in result.report.anomalies]
    return (
        f"seed {result.seed} ({', '.join(result.faults)}): {bad[:3]} {result.failure or ''} "
        f"— replay: globelog failover simulate --seed {result.seed} --trace"
    )


@pytest.mark.parametrize("seed", range(100, 100 + SEEDS), ids=lambda s: f"seed_{s}")
def test_every_seed_keeps_every_guarantee_through_the_real_code(seed: int) -> None:
    result = simulate(seed)
    assert result.ok, _describe(result)
    sends = Counter(op.type for op in result.history if op.f == "send" and op.type != "invoke")
    assert sends["ok"] > 100, sends
    faults = [op for op in result.history if op.f == "fault"]
    assert {str(op.fault) for op in faults} >= set(result.faults), faults


@pytest.mark.parametrize("seed", sorted(FOUND), ids=lambda s: f"seed_{s}")
def test_the_seeds_that_found_bugs_pass(seed: int) -> None:
    result = simulate(seed)
    assert result.ok, f"{_describe(result)} (found: {FOUND[seed]})"


def test_seeds_draw_every_fault_kind() -> None:
    drawn = {kind for seed in range(200) for kind in faults_of(seed, SimConfig())}
    assert drawn == set(SIM_FAULT_KINDS)


FINGERPRINT = """
import hashlib, sys
from verify.sim.run import simulate
r = simulate(int(sys.argv[1]))
print(hashlib.sha256("\\n".join(r.lines).encode()).hexdigest(), r.virtual_s, r.events)
"""


def test_a_seed_replays_exactly_in_another_process() -> None:
    """Another process with another hash seed (other set and dict orders of strings) replays
    the seed to the byte: its history, its virtual time, its ZooKeeper operations and bytes."""
    runs = under_hash_seeds(FINGERPRINT, "2")
    assert runs[0] == runs[1] != ""
    here = simulate(2)
    digest = hashlib.sha256("\n".join(here.lines).encode()).hexdigest()
    assert runs[0].split()[0] == digest


# Broken guarantees the failover run catches end to end (the others, an ack at one copy and
# recovery without fencing, the ledger simulation catches at the moment of each ack:
# tests/simulation/sim/test_ledger_on_sim.py; through the proxies a paused owner's session and
# add timeouts stop it before fencing is needed).
CAUGHT = [
    # an owner killed (its lock broken at once) and one paused (taken at its session's end)
    (runtime.FORGET_PRODUCERS,
     SimConfig(faults=("kill-write-proxy", "pause-write-proxy"), faults_per_seed=2),
     "duplicate-idempotent"),
    # two bookies a region leave an ensemble of four in two regions whatever the order; three
    # let it fill from the writer's region, and the audit calls the ensemble unsafe
    (runtime.IGNORE_REGIONS, SimConfig(faults=("kill-bookie",), faults_per_seed=1, racks=3),
     "durability"),
]  # fmt: skip


@pytest.mark.parametrize(("broken", "config", "kind"), CAUGHT, ids=[c[0] for c in CAUGHT])
def test_a_broken_guarantee_is_caught_and_shown_small(
    broken: str, config: SimConfig, kind: str
) -> None:
    """The failover run catches the guarantee switched off in the real code, and the
    smallest history the checker still rejects is a few ops."""
    config = dataclasses.replace(config, broken=(broken,))
    for seed in range(1, CAUGHT_WITHIN + 1):
        result = simulate(seed, config)
        found = [a for a in result.report.anomalies if a.kind == kind]
        if found:
            smallest = minimal_history(result.history, kind, found[0].stream)
            assert 0 < len(smallest) <= 12, [op.describe() for op in smallest]
            print(f"{broken}: caught at seed {seed}; {len(smallest)} ops")
            return
    pytest.fail(f"{broken}: no {kind} within {CAUGHT_WITHIN} seeds")


def test_the_rebuilders_remake_a_wiped_bookies_copies_in_the_simulation() -> None:
    """rebuild/ runs there too: a bookie's disk lost mid-run, the auditor marks its ledgers
    once it is gone lost_bookie_delay_s, the workers re-make the copies elsewhere, and the
    final copy audit finds every fragment whole."""
    result = simulate(8, SimConfig(faults=("wipe-bookie",), faults_per_seed=1))
    assert result.ok, _describe(result)
    [held] = [op for op in result.history if op.f == "held"]
    assert " rebuilt in " in held.detail, held.detail
    [replicas] = [op for op in result.history if op.f == "replicas"]
    assert replicas.value == 0 and "nothing under-replicated" in replicas.detail
