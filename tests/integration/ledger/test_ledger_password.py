"""A stream's segment ledgers carry the deployment's secret password (`ledger.password` of
`security.dir`): whoever reaches a bookie without it can neither fence a segment (the first
step of taking a stream over) nor add to it, and a ledger client without it is refused before
it asks. The password is no constant of the code: two deployments differ."""

from __future__ import annotations

import asyncio

import pytest

from core.records import Record
from core.routes import publish_topology
from core.security.secrets import ledger_password
from ledger.codecs.entry import master_key
from ledger.connections.bookie_client import BookieClient
from ledger.errors import LedgerUnauthorizedError, UnauthorizedError
from localcluster.controller import Cluster
from tests.support import security
from tests.support.ledgers import ledger_client
from tests.support.security import SECURITY
from tests.support.streams import fresh_namespace, stream_env

GUARD_S = 15.0
GUESSES = (b"", b"globelog", b"globelog-stream", b"demo")  # what an intruder would try


async def test_a_segment_cannot_be_fenced_or_opened_without_the_deployment_password(
    cluster: Cluster,
) -> None:
    secret = ledger_password(SECURITY)
    assert len(secret) >= 32 and secret not in GUESSES
    async with stream_env(cluster, "us-east", fresh_namespace()) as env:
        await env.streams.create_stream("s")
        writer = await env.writer("s")
        await writer.write(Record(b"before"))
        segment = (await env.streams.segments("s"))[-1].segment
        ledger = await env.ledgers.metadata(segment.ledger_id)
        assert ledger.metadata.password == secret
        bookie = ledger.metadata.ensembles[-1].bookies[0]
        published = publish_topology(cluster.topology)
        region = cluster.topology.bookie(bookie).region
        async with BookieClient.for_region(published, region, security.bookie_config()) as bookies:
            for guess in GUESSES:
                with pytest.raises(UnauthorizedError):
                    await asyncio.wait_for(
                        bookies.read_last_entry(
                            bookie, segment.ledger_id, fence=True, master_key=master_key(guess)
                        ),
                        GUARD_S,
                    )
        async with ledger_client(cluster, "eu-west", password=b"globelog-stream") as other:
            with pytest.raises(LedgerUnauthorizedError, match="password does not match"):
                await other.open(segment.ledger_id, recover_ledger=True)
        # nothing was fenced: the owner goes on writing to the same segment
        await writer.write(Record(b"after"))
        assert (await env.streams.segments("s"))[-1].segment.ledger_id == segment.ledger_id
        await writer.close()
