"""Every await of the ledger writer and of recovery ends (I8), on the real cluster: a close
after the handle failed with nothing pending, an ensemble change whose task dies, and a
recovery that cannot reach enough bookies."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.topology import Replication
from ledger import LedgerFencedError, LedgerInternalError, LedgerRecoveryTimeoutError
from ledger.drivers.context import LedgerContext
from ledger.machines.add_events import AddFailed
from ledger.machines.signals import BookieFailure
from localcluster import controller, wan
from localcluster.controller import Cluster
from localcluster.tools import Tools
from tests.support.ledgers import ledger_client

PASSWORD = b"liveness"
REPLICATION = Replication(3, 3, 2, 2)
BOUND_S = 20.0  # far above every configured timeout below: a hang, not a slow answer


async def test_close_ends_when_the_handle_failed_with_nothing_pending(
    cluster: Cluster, tools: Tools
) -> None:
    async with ledger_client(cluster, "us-east") as client:
        writer = await client.create(REPLICATION, PASSWORD)
        late = writer.metadata.current_ensemble[2]
        name = cluster.topology.bookie(late).name
        await controller.fault(cluster, tools, "pause", name)
        try:
            await writer.add(b"acknowledged by the other two")
            # The paused bookie's late answer for the acknowledged entry: FENCED.
            writer._runner.feed(AddFailed(0, late, BookieFailure.FENCED))
            with pytest.raises(LedgerFencedError):
                await asyncio.wait_for(writer.close(), BOUND_S)
        finally:
            await controller.fault(cluster, tools, "resume", name)


async def test_an_ensemble_change_task_that_dies_fails_the_writer(
    cluster: Cluster, tools: Tools, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ledger_client(cluster, "us-east", add_timeout_s=1.0) as client:
        writer = await client.create(REPLICATION, PASSWORD)
        await writer.add(b"first")

        def broken(*args: object) -> object:
            raise RuntimeError("a bug in placement")

        monkeypatch.setattr(LedgerContext, "replace", broken)
        remote = next(b for b in writer.metadata.current_ensemble if "3181" not in b)
        name = cluster.topology.bookie(remote).name
        await controller.fault(cluster, tools, "pause", name)
        try:

            async def keep_adding() -> None:  # until the ensemble change (and its crash) comes
                while True:
                    await writer.add(b"more")

            with pytest.raises(LedgerInternalError, match="RuntimeError: a bug in placement"):
                await asyncio.wait_for(keep_adding(), BOUND_S)
            with pytest.raises(LedgerInternalError):
                await asyncio.wait_for(writer.close(), BOUND_S)
        finally:
            await controller.fault(cluster, tools, "resume", name)


async def test_recovery_cut_off_from_the_ensemble_ends_within_its_bound(
    cluster: Cluster,
) -> None:
    async with ledger_client(cluster, "us-east") as east:
        writer = await east.create(REPLICATION, PASSWORD)
        for i in range(20):
            await writer.add(f"entry-{i}".encode())
        await writer.abandon()  # as a crashed writer: the ledger stays OPEN
    topology = cluster.topology
    await wan.partition(topology, "us-west", "us-east")
    await wan.partition(topology, "us-west", "eu-west")
    try:
        async with ledger_client(cluster, "us-west", recovery_timeout_s=3.0) as west:
            started = time.monotonic()
            with pytest.raises(LedgerRecoveryTimeoutError) as timed_out:
                await asyncio.wait_for(
                    west.open(writer.ledger_id, PASSWORD, recover_ledger=True), BOUND_S
                )
            took = time.monotonic() - started
    finally:
        await wan.heal(topology)
    message = str(timed_out.value)
    assert "within 3.0 s" in message and "(us-east)" in message and "(eu-west)" in message
    assert timed_out.value.retriable
    print(f"recovery gave up after {took:.1f} s: {message}")
    async with ledger_client(cluster, "us-west") as west:
        reader = await asyncio.wait_for(
            west.open(writer.ledger_id, PASSWORD, recover_ledger=True), BOUND_S
        )
        assert reader.is_closed and reader.lac == 19
        assert await reader.read_entries(0, 19) == [f"entry-{i}".encode() for i in range(20)]
