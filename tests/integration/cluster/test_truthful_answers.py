"""What the write proxies answer under faults is what happened (docs/http-api.md, "Errors"),
on the real cluster with its proxy processes: a takeover whose recovery of the last segment
fails answers a documented 503 that says nothing was written (never a 500), and the same
idempotent write retried once the bookies are back lands exactly once."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import aiohttp

from core.answers import ANSWERS
from global_meta import MetaStore
from global_meta.streams import StreamMetaStore
from ledger.drivers.metadata_store import LedgerMetadataStore
from localcluster import controller
from localcluster.controller import Cluster
from localcluster.tools import Tools
from region.client import ProxyClient
from tests.support.security import client_session
from tests.support.streams import fresh_namespace, stream_env

TAKEOVER_BOUND_S = 90.0  # the dead owner's session ends, then a recovery that cannot finish


def proxy_url(cluster: Cluster, region: str) -> str:
    endpoint = cluster.topology.region(region).write_proxies[0].endpoint
    return f"https://{endpoint.host}:{endpoint.port}"


async def last_ensemble(cluster: Cluster, namespace: str) -> list[str]:
    """The bookie names of the stream's last segment's current ensemble."""
    async with await MetaStore.of(cluster.topology, "us-east") as store:
        segments = await StreamMetaStore(store, namespace).segments("s")
        ledger = await LedgerMetadataStore(store).read(segments[-1].segment.ledger_id)
    return [cluster.topology.bookie(b).name for b in ledger.metadata.ensembles[-1].bookies]


async def answers_until_storage_refuses(url: str, params: dict[str, str]) -> list[dict[str, Any]]:
    """POSTs the write until the proxy answers `storage_unavailable` (its takeover's recovery
    failed), bounded; every answer on the way, with its status."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + TAKEOVER_BOUND_S
    async with client_session(timeout=aiohttp.ClientTimeout(total=60)) as http:
        while time.monotonic() < deadline:
            async with http.post(url, params=params, data=b"after", allow_redirects=False) as r:
                body = await r.json(content_type=None)
            seen.append({"status": r.status, **body})
            if body.get("code") == "storage_unavailable" or r.status < 300:
                return seen
            await asyncio.sleep(0.2)
    raise AssertionError(f"no storage_unavailable within {TAKEOVER_BOUND_S} s: {seen[-5:]}")


async def test_a_failed_recovery_is_a_documented_503_and_the_retry_lands_once(
    services: Cluster, tools: Tools
) -> None:
    namespace = fresh_namespace()
    east, west = proxy_url(services, "us-east"), proxy_url(services, "us-west")
    producer_id = random.getrandbits(62)
    async with ProxyClient([east], namespace, deadline_s=30) as client:
        await client.create("s")
        producer = client.producer("s", producer_id)
        for i in range(3):
            await producer.write(f"before-{i}".encode())
        assert (await client.describe("s"))["owner"] == "wp-us-east@us-east"
    ensemble = await last_ensemble(services, namespace)
    # Every copy out of the new owner's reach but its own region's: its recovery cannot fence.
    doomed = [b for b in ensemble if services.topology.bookie(b).region != "us-west"]
    assert len(doomed) >= len(ensemble) - 1, ensemble
    await controller.fault(services, tools, "kill", "wp-us-east")
    try:
        for bookie in doomed:
            await controller.fault(services, tools, "kill", bookie)
        params = {
            "producer": str(producer_id),
            "producer_seq": "3",
            "unreachable_owner": "wp-us-east@us-east",  # as a client that could not reach it
        }
        url = f"{west}/v1/namespaces/{namespace}/streams/s/records"
        seen = await answers_until_storage_refuses(url, params)
    finally:
        for bookie in doomed:
            await controller.fault(services, tools, "restart", bookie)
    for answer in seen:
        assert answer["status"] != 500, answer
        code = answer["code"]
        assert code in ANSWERS and answer["status"] == ANSWERS[code].status, answer
        assert answer["outcome"] == "not_applied", answer  # nothing was accepted yet
    refused = seen[-1]
    assert refused["status"] == 503 and refused["retriable"] is True, refused
    assert refused["message"].split(":")[0].startswith(("ledger_", "bookie_", "not_enough")), (
        refused
    )
    async with ProxyClient([west], namespace, deadline_s=60) as client:
        retried = await client.producer("s", producer_id, first_seq=3).write(b"after")
        again = await client.producer("s", producer_id, first_seq=3).write(b"after")
    assert not retried.duplicate and again.duplicate and again.dlsn == retried.dlsn
    async with stream_env(services, "eu-west", namespace) as env:
        records = await env.read_complete("s", 4)
    assert [r.payload for r in records] == [b"before-0", b"before-1", b"before-2", b"after"]
