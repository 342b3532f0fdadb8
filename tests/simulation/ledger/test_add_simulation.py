"""Seeded simulation of AddState: random acks, reordering, crashes, read-only bookies, fencing,
moves of healthy bookies (`respread`).

Each seed picks quorums and a fault schedule, then drives one writer through the in-test
cluster model. Every step checks (in cluster_model.Client and here): completions come
strictly in entry order; every completed entry is stored on >= A bookies of its write set
(as the metadata has it at that moment, and still at the end); the LAC never goes back; a
fenced answer to a pending add fails the handle at once, and nothing completes after that;
an entry fails at most once and never after completing.
After the faults stop, every add must settle, and a close must close at the LAC.
A failing seed reproduces alone: pytest -k "seed_17" or run(17).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pytest

from ledger.machines.add_state import AddConfig, AddState
from ledger.machines.signals import Ticked
from tests.simulation.ledger.cluster_model import Client, Cluster, Metadata

pytestmark = pytest.mark.simulation

SEEDS = 400
STEPS = 300
QUORUMS = [(3, 3, 2), (3, 2, 2), (5, 3, 2), (4, 3, 3), (3, 3, 1), (6, 4, 3), (2, 2, 2)]
TIMEOUT_S = 1.0
SETTLE_ROUNDS_MAX = 100  # drain + tick rounds after the faults stop


@dataclass
class Outcome:
    completed: int
    failed: int
    fenced: bool
    ensemble_changes: int
    closed: bool
    completed_in_changes: int


def submit(writer: Client, rng: random.Random) -> None:
    machine: AddState = writer.machine
    if machine.room == 0:
        return
    payload_len = rng.randint(1, 100)
    entry_id = machine.submit(payload_len)
    if entry_id is None:
        assert machine.error is not None and writer.lac == machine.lac
        return
    writer.submitted(entry_id, payload_len)
    writer.pump()


def fault(cluster: Cluster, rng: random.Random) -> None:
    """Toggle one fault of one bookie: crashed (refusing or silent), slow, or read-only."""
    bookie = cluster.bookies[rng.choice(sorted(cluster.bookies))]
    roll = rng.random()
    if roll < 0.5:
        bookie.crashed = not bookie.crashed
        bookie.refuses = rng.random() < 0.5
    elif roll < 0.8:
        bookie.slow = not bookie.slow
    else:
        bookie.read_only = not bookie.read_only


def fence(cluster: Cluster) -> None:
    """Another client starts recovery: metadata IN_RECOVERY, every bookie fenced."""
    cluster.metadata.state = "IN_RECOVERY"
    for bookie in cluster.bookies.values():
        bookie.fenced = True


def settle(writer: Client, cluster: Cluster, now_s: float) -> float:
    for _ in range(SETTLE_ROUNDS_MAX):
        while cluster.network.deliver_one():
            pass
        machine: AddState = writer.machine
        if machine.is_terminal or machine.pending_count == 0:
            return now_s
        now_s += TIMEOUT_S
        writer.feed(Ticked(now_s))
    raise AssertionError(f"adds never settled: {writer.machine.pending_count} pending")


def run(seed: int) -> Outcome:
    rng = random.Random(seed)
    size, write_quorum, ack_quorum = rng.choice(QUORUMS)
    names = [f"b{i}" for i in range(size + 4)]
    metadata = Metadata(write_quorum, ack_quorum, [(0, tuple(names[:size]))])
    cluster = Cluster(rng, names, metadata)
    config = AddConfig(
        add_timeout_s=TIMEOUT_S,
        pending_adds_max=rng.choice([1, 4, 32]),
        ensemble_changes_max=10_000,
    )
    machine = AddState(metadata.ensembles[0][1], write_quorum, ack_quorum, config=config)
    writer = Client("writer", machine, cluster, metadata)
    fence_step = rng.randrange(2 * STEPS)  # about half the runs are fenced
    now_s = 0.0
    for step in range(STEPS):
        if step == fence_step:
            fence(cluster)
        roll = rng.random()
        if roll < 0.3:
            submit(writer, rng)
        elif roll < 0.8:
            cluster.network.deliver_one()
        elif roll < 0.9:
            now_s += rng.uniform(0, TIMEOUT_S / 2)
            writer.feed(Ticked(now_s))
        elif roll < 0.95:
            fault(cluster, rng)
        elif roll < 0.97:  # the driver's placement asks to move a bookie (AddState.respread)
            machine.respread(rng.randrange(size))
            writer.pump()
        lac = writer.lac
        assert lac is not None and machine.lac == lac, (machine.lac, lac)
    cluster.heal()
    now_s = settle(writer, cluster, now_s)
    writer.check_durable()
    if not machine.is_terminal:
        machine.begin_close()
        writer.pump()
        settle(writer, cluster, now_s)
        lac = machine.lac
        if cluster.metadata.state == "OPEN":
            assert writer.closed is not None, "close never finished"
            assert writer.closed.last_entry_id == lac == machine.lap, (writer.closed, lac)
            assert writer.closed.length == sum(writer.payloads[e] for e in range(lac + 1))
            assert not writer.held, f"payloads held after the close: {sorted(writer.held)}"
    return Outcome(
        completed=(writer.lac or -1) + 1,
        failed=len(writer.failed),
        fenced=writer.saw_fenced,
        ensemble_changes=len(cluster.metadata.ensembles) - 1,
        closed=writer.closed is not None,
        completed_in_changes=writer.completed_in_changes,
    )


@pytest.mark.parametrize("seed", range(SEEDS), ids=lambda seed: f"seed_{seed}")
def test_writer_invariants_hold(seed: int) -> None:
    run(seed)


def test_the_simulation_reaches_the_interesting_cases() -> None:
    """The faults must actually happen, or the invariants above prove little."""
    outcomes = [run(seed) for seed in range(0, SEEDS, 4)]
    tally = Counter(
        kind
        for o in outcomes
        for kind, hit in [
            ("completed", o.completed > 0),
            ("failed", o.failed > 0),
            ("fenced", o.fenced),
            ("changed", o.ensemble_changes > 0),
            ("closed", o.closed),
            ("completed during a change", o.completed_in_changes > 0),
        ]
        if hit
    )
    for kind in ("completed", "failed", "fenced", "changed", "closed", "completed during a change"):
        assert tally[kind] >= len(outcomes) // 10, tally
