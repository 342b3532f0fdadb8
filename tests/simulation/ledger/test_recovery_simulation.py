"""Seeded simulation of recovery racing its writer (the TLA+ model's invariants, in Python).

A writer adds entries through faults; then another client recovers the ledger (metadata
IN_RECOVERY, RecoveryState) while the writer either stops or keeps writing as a zombie, the
network reorders everything, bookies crash, turn read-only, or hold a corrupt copy. A
failed recovery is retried, as anyone may. After the faults stop, recovery must close the
ledger, and then:
- every entry the writer ever completed is in it (no acknowledged entry is lost, I1/I5);
- its length is exactly the writer's payloads through its last entry;
- every entry of it is stored, with the writer's payload, on >= A bookies of its write set
  under the closed metadata (including recovery's ensemble changes, written at the close).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from ledger.machines.add_state import AddConfig, AddState
from ledger.machines.recovery_state import RecoveryConfig, RecoveryState
from ledger.machines.signals import Ticked
from tests.simulation.ledger.cluster_model import Client, Cluster, Metadata
from tests.simulation.ledger.test_add_simulation import QUORUMS, TIMEOUT_S, fault, submit

pytestmark = pytest.mark.simulation

SEEDS = 300
RACE_STEPS = 250
RACE_ATTEMPTS_MAX = 10  # recoveries tried while faults go on
HEALED_ATTEMPTS_MAX = 2  # once healed, a recovery must succeed (a second covers one in flight)
SETTLE_ROUNDS_MAX = 100


@dataclass
class Outcome:
    last_entry_id: int
    writer_lac: int
    attempts: int
    zombie_failed: bool


def start_recovery(cluster: Cluster, now_s: float) -> Client:
    cluster.metadata.state = "IN_RECOVERY"  # the CAS that also stops the writer's changes
    view = cluster.metadata.copy()
    config = RecoveryConfig(read_timeout_s=TIMEOUT_S, add=AddConfig(add_timeout_s=TIMEOUT_S))
    machine = RecoveryState(view.ledger_metadata(), now_s=now_s, config=config)
    return Client("recovery", machine, cluster, view)


def corrupt_a_copy(cluster: Cluster, rng: random.Random, writer: Client) -> None:
    """Rot one copy of an entry that keeps >= A good copies in its write set."""
    if not writer.payloads:
        return
    entry_id = rng.choice(sorted(writer.payloads))
    good = [
        name
        for name in cluster.metadata.write_set(entry_id)
        if (s := cluster.bookies[name].entries.get(entry_id)) is not None
        and s.payload_len == writer.payloads[entry_id]
        and entry_id not in cluster.bookies[name].corrupt
    ]
    if len(good) > cluster.metadata.ack_quorum:
        cluster.bookies[rng.choice(good)].corrupt.add(entry_id)


def write_for_a_while(writer: Client, cluster: Cluster, rng: random.Random, steps: int) -> float:
    now_s = 0.0
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.35:
            submit(writer, rng)
        elif roll < 0.85:
            cluster.network.deliver_one()
        elif roll < 0.95:
            now_s += rng.uniform(0, TIMEOUT_S / 2)
            writer.feed(Ticked(now_s))
        else:
            fault(cluster, rng)
    return now_s


def run(seed: int) -> Outcome:
    rng = random.Random(seed)
    size, write_quorum, ack_quorum = rng.choice(QUORUMS)
    names = [f"b{i}" for i in range(size + 4)]
    metadata = Metadata(write_quorum, ack_quorum, [(0, tuple(names[:size]))])
    cluster = Cluster(rng, names, metadata)
    config = AddConfig(add_timeout_s=TIMEOUT_S, pending_adds_max=rng.choice([1, 4, 32]))
    writer_state = AddState(metadata.ensembles[0][1], write_quorum, ack_quorum, config=config)
    writer = Client("writer", writer_state, cluster, metadata)
    now_s = write_for_a_while(writer, cluster, rng, rng.randrange(10, 200))
    zombie = rng.random() < 0.5
    recovery = start_recovery(cluster, now_s)
    attempts = 1
    for _ in range(RACE_STEPS):
        roll = rng.random()
        if roll < 0.15:
            if zombie:
                submit(writer, rng)
        elif roll < 0.75:
            cluster.network.deliver_one()
        elif roll < 0.87:
            now_s += rng.uniform(0, TIMEOUT_S / 2)
            writer.feed(Ticked(now_s))
            recovery.feed(Ticked(now_s))
        elif roll < 0.95:
            fault(cluster, rng)
        else:
            corrupt_a_copy(cluster, rng, writer)
        if recovery.recovery_error is not None and attempts < RACE_ATTEMPTS_MAX:
            recovery, attempts = start_recovery(cluster, now_s), attempts + 1
    cluster.heal()
    healed_attempts = 0
    for _ in range(SETTLE_ROUNDS_MAX):
        while cluster.network.deliver_one():
            pass
        if recovery.closed is not None:
            break
        if recovery.recovery_error is not None:
            assert healed_attempts < HEALED_ATTEMPTS_MAX, recovery.recovery_error
            recovery, attempts = start_recovery(cluster, now_s), attempts + 1
            healed_attempts += 1
            continue  # deliver its requests before time moves on
        now_s += TIMEOUT_S
        writer.feed(Ticked(now_s))
        recovery.feed(Ticked(now_s))
    closed = recovery.closed
    assert closed is not None, "recovery never closed the ledger after the faults stopped"
    check_closed_ledger(cluster, writer, closed.last_entry_id, closed.length)
    writer_lac = -1 if writer.lac is None else writer.lac
    return Outcome(closed.last_entry_id, writer_lac, attempts, writer_state.is_terminal)


def check_closed_ledger(cluster: Cluster, writer: Client, last: int, length: int) -> None:
    metadata = cluster.metadata
    assert metadata.state == "CLOSED" and metadata.last_entry_id == last, metadata
    writer_lac = -1 if writer.lac is None else writer.lac
    assert writer_lac <= last, f"the writer completed {writer_lac}; recovery closed at {last}"
    assert length == sum(writer.payloads[e] for e in range(last + 1)), (length, last)
    for entry_id in range(last + 1):
        payload_len = writer.payloads[entry_id]
        good = sum(
            1
            for name in metadata.write_set(entry_id)
            if (s := cluster.bookies[name].entries.get(entry_id)) is not None
            and s.payload_len == payload_len
            and entry_id not in cluster.bookies[name].corrupt
        )
        assert good >= metadata.ack_quorum, f"entry {entry_id} has {good} good copies"


@pytest.mark.parametrize("seed", range(SEEDS), ids=lambda seed: f"seed_{seed}")
def test_recovery_keeps_every_acknowledged_entry(seed: int) -> None:
    run(seed)


def test_the_simulation_reaches_the_interesting_cases() -> None:
    outcomes = [run(seed) for seed in range(0, SEEDS, 3)]
    assert sum(o.last_entry_id > o.writer_lac for o in outcomes) >= 5, "nothing recovered"
    assert sum(o.last_entry_id >= 0 for o in outcomes) >= len(outcomes) // 2
    assert sum(o.attempts > 1 for o in outcomes) >= 3, "no recovery ever failed and retried"
    assert sum(o.zombie_failed for o in outcomes) >= 5, "no zombie writer was stopped"
