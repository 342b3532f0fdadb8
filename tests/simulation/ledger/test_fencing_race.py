"""The interleaving behind TLA+ Defect 1, scripted message by message over the cluster model.

(BookKeeper's LedgerRecovery2Test.testFirstWriterCannotCommitWriteAfter2ndWriterCloses.)
E=W=3, A=2. The writer's entry 0 reached b0 only. Recovery fences b0 and b1, which is
quorum coverage, while its fence request to b2 is still on the way. Entry 0 is denied by
b1 and b2: missing, so the ledger closes empty. Then the writer's add reaches b2. If the
recovery read had not fenced b2, b2 would store it and the writer would count b0 + b2 as
an ack quorum: an acknowledged entry outside the closed ledger. Recovery reads fence, so
b2 refuses it and the writer learns it is fenced.
"""

from __future__ import annotations

import random

import pytest

from ledger.machines import read_state, recovery_state
from ledger.machines.add_events import CloseLedger
from ledger.machines.add_state import AddState
from tests.simulation.ledger.cluster_model import Client, Cluster, Metadata
from tests.simulation.ledger.test_recovery_simulation import start_recovery

pytestmark = pytest.mark.simulation


def race() -> tuple[Client, Client]:
    names = ["b0", "b1", "b2"]
    metadata = Metadata(3, 2, [(0, tuple(names))])
    cluster = Cluster(random.Random(0), names, metadata)
    writer = Client("writer", AddState(names, 3, 2), cluster, metadata)
    net = cluster.network
    assert writer.machine.submit(10) == 0
    writer.submitted(0, 10)
    writer.pump()
    net.deliver("writer:add e=0 -> b0")
    net.deliver("writer:add e=0 <- b0")  # one ack of the two needed
    recovery = start_recovery(cluster, 0.0)
    for bookie in ("b0", "b1"):  # fenced; coverage holds without b2
        net.deliver(f"recovery:read-lac -> {bookie}")
        net.deliver(f"recovery:read-lac <- {bookie}")
    net.deliver("writer:add e=0 -> b1")  # refused there: b1 is fenced (the reply waits)
    for bookie in ("b1", "b2"):  # two denials: W - A + 1
        net.deliver(f"recovery:read e=0 -> {bookie}")
        net.deliver(f"recovery:read e=0 <- {bookie}")
    assert recovery.closed == CloseLedger(-1, 0), "entry 0 was concluded missing"
    net.deliver("writer:add e=0 -> b2")  # only now does the writer's add reach b2
    net.deliver("writer:add e=0 <- b2")
    while net.deliver_one():
        pass
    return writer, recovery


def test_recovery_reads_fence_so_the_writer_cannot_commit_after_the_close() -> None:
    writer, recovery = race()
    assert writer.lac == -1, "the writer completed an entry the closed ledger does not hold"
    assert writer.saw_fenced and writer.machine.is_terminal
    assert recovery.cluster.bookies["b2"].entries == {}


class _NonFencingRead(read_state.EntryReadState):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs["fence"] = False
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


def test_without_fencing_reads_the_same_race_loses_an_acknowledged_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The control: the race above is the one that matters."""
    monkeypatch.setattr(recovery_state, "EntryReadState", _NonFencingRead)
    writer, recovery = race()
    assert recovery.closed == CloseLedger(-1, 0)
    assert writer.lac == 0, "expected the defect: entry 0 acknowledged, yet not in the ledger"
