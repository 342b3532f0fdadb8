"""Probes of the region services shared by the demo, `globelog bench proxy` and the failover
run: where a region's proxy listens, and a reader that long-polls a region's read proxy and
measures how soon records written with {"n", "t"} payloads reach it."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import aiohttp

from localcluster.controller import Cluster
from localcluster.probes import operator_session

POLL_WAIT_MS = 1000
READ_RETRY_S = 0.5


@dataclass
class Received:
    """What one region's reader got: counts by record number, delivery latencies."""

    region: str
    counts: dict[int, int] = field(default_factory=dict)
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    next_seq: int = 0


def proxy_url(cluster: Cluster, region: str, kind: str) -> str:
    group = cluster.topology.region(region)
    proxy = (group.write_proxies if kind == "write" else group.read_proxies)[0]
    return cluster.topology.proxy_url(proxy)


async def tail_region(
    url: str,
    received: Received,
    stop: asyncio.Event,
    stream: str,
    namespace: str,
) -> None:
    """Long-polls the region's read proxy; retries through the region's outage."""
    path = f"{url}/v1/namespaces/{namespace}/streams/{stream}/records"
    timeout = aiohttp.ClientTimeout(total=POLL_WAIT_MS / 1000 + 5)
    async with operator_session(timeout) as http:
        while not stop.is_set():
            query = {"from_seq": str(received.next_seq), "wait_ms": str(POLL_WAIT_MS)}
            try:
                async with http.get(path, params=query) as answer:
                    page = await answer.json()
                    if answer.status != 200:
                        raise aiohttp.ClientError(f"{answer.status}: {page.get('code')}")
            except (aiohttp.ClientError, TimeoutError, ValueError):
                if _being_cancelled():  # aiohttp may turn a cancel into a timeout
                    raise asyncio.CancelledError from None
                received.errors += 1
                await asyncio.sleep(READ_RETRY_S)
                continue
            now = time.time()
            for record in page["records"]:
                value = json.loads(record["payload"])
                received.counts[value["n"]] = received.counts.get(value["n"], 0) + 1
                received.latencies_s.append(now - value["t"])
            if page["next_seq"] is not None:
                received.next_seq = page["next_seq"]


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
