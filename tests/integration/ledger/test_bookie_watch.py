"""A watching client (a write proxy's: `LedgerClient.watch_bookies`) knows a bookie behind a
cut is silent, and since about when, though it sent that bookie nothing of its own; the
bookies it still reaches keep answering, and the cut one answers again after the heal. On the
real cluster, a partition of the emulated WAN (bookie traffic held and dropped, as a cut)."""

from __future__ import annotations

import asyncio

from core.topology import Replication
from ledger.connections.bookie_client import WATCH_EVERY_S
from localcluster import wan
from localcluster.controller import Cluster
from localcluster.probes import wait_until
from tests.support.ledgers import ledger_client

HERE, CUT, STILL = "us-east", "eu-west", "us-west"
CONNECTED_WAIT_S = 3.0  # the first questions dialled and answered
# the cut's question leaves within a turn of the watch; this much more for a busy machine
# (all checked before a question pending at the cut is given up: WATCH_TIMEOUT_S, 5 s)
TURN_SLACK_S = 1.5
HEAL_WAIT_S = 30.0


async def test_a_watching_client_dates_a_cut_bookies_silence_without_other_traffic(
    cluster: Cluster,
) -> None:
    topology = cluster.topology
    cut = [b.bookie_id for b in topology.bookies if b.region == CUT]
    still = [b.bookie_id for b in topology.bookies if b.region == STILL]
    async with ledger_client(cluster, HERE) as client:
        bookies, clock = client.context.bookies, client.context.clock
        assert all(bookies.silent_since_s(b) is None for b in cut + still), "nothing sent yet"
        answers: list[tuple[str, float]] = []  # (bookie, when) of each probe answered
        observe = bookies._observe

        def watched(bookie: str, operation: str, seconds: float, healthy: bool) -> None:
            if operation == "probe" and healthy:
                answers.append((bookie, clock()))
            if observe is not None:
                observe(bookie, operation, seconds, healthy)

        bookies._observe = watched
        watch = asyncio.create_task(client.watch_bookies())
        try:
            await asyncio.sleep(CONNECTED_WAIT_S)
            assert {b for b, _ in answers} >= set(cut + still), "every bookie answered"
            before_cut = clock()
            await wan.partition(topology, HERE, CUT)
            cut_at = clock()
            try:
                await asyncio.sleep(TURN_SLACK_S + WATCH_EVERY_S)
                since = {b: bookies.silent_since_s(b) for b in cut}
                for bookie, at in since.items():
                    assert at is not None, f"{bookie}: no question pending through the cut"
                    # the first question it left unanswered: sent about when the cut began
                    assert before_cut - 1.0 <= at <= cut_at + TURN_SLACK_S, (bookie, at - cut_at)
                for bookie in still:  # answered since the cut: any pending question is newer
                    at = bookies.silent_since_s(bookie)
                    assert at is None or at > before_cut, (bookie, at - before_cut)
                await asyncio.sleep(1.0)  # still before the cut's questions are given up
                assert {b: bookies.silent_since_s(b) for b in cut} == since, "still no answer"
                assert not [b for b, at in answers if b in cut and at > cut_at + 1.0]
                assert all(1 <= bookies.pending_requests(b) <= 2 for b in cut), "two at most"
            finally:
                await wan.heal(topology, HERE, CUT)
            healed_at = clock()

            async def answered_again() -> bool:
                return {b for b, at in answers if at > healed_at} >= set(cut)

            await wait_until("the cut bookies answering again", answered_again, HEAL_WAIT_S)
            for bookie in cut:  # no longer dated to the cut
                at = bookies.silent_since_s(bookie)
                assert at is None or at > healed_at, (bookie, at - healed_at)
        finally:
            watch.cancel()
            await asyncio.wait([watch])
        assert all(bookies.pending_requests(b) == 0 for b in cut + still)


async def test_a_new_ledger_is_placed_off_the_bookies_a_cut_keeps_silent(
    cluster: Cluster,
) -> None:
    """A new owner makes its segment's ledger a few seconds into a cut, while the cut
    region's bookies are still registered: placement leaves out the bookies the watch finds
    silent, and reads ask them last; both take them again once they answer after the heal."""
    topology = cluster.topology
    cut = {b.bookie_id for b in topology.bookies if b.region == CUT}
    wider = Replication(4, 4, 3, 2)
    async with ledger_client(cluster, HERE) as client:
        placement, clock = client.context.placement, client.context.clock
        watch = asyncio.create_task(client.watch_bookies())
        try:
            await asyncio.sleep(CONNECTED_WAIT_S)
            assert all(placement.answered_lately(b, clock(), 1.5) for b in cut)
            await wan.partition(topology, HERE, CUT)
            try:
                await asyncio.sleep(TURN_SLACK_S + WATCH_EVERY_S)
                assert cut <= set(placement.cluster.writable), "still registered"
                everyone = tuple(b.bookie_id for b in topology.bookies)
                order = client.context.read_order(everyone, clock())
                assert set(order[-len(cut) :]) == cut, order
                writer = await client.create(wider)
                assert not cut & set(writer.metadata.current_ensemble), writer.metadata
                await asyncio.wait_for(writer.add(b"placed off the cut"), 10)
                await asyncio.wait_for(writer.close(), 10)
            finally:
                await wan.heal(topology, HERE, CUT)

            async def answering_again() -> bool:
                silent = client.context.bookies.silent_since_s
                return all(silent(b) is None for b in cut)

            await wait_until("the cut bookies answering again", answering_again, HEAL_WAIT_S)
            order = client.context.read_order(everyone, clock())
            assert order == placement.read_order(everyone, clock()), "placement's own again"
            writer = await client.create(wider)  # the whole cluster again
            assert cut & set(writer.metadata.current_ensemble), writer.metadata
            await asyncio.wait_for(writer.close(), 10)
        finally:
            watch.cancel()
            await asyncio.wait([watch])
