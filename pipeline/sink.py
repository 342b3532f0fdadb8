"""Rows appended to a globelog stream through the region's write proxies, each at most once
however often Spark runs a task again (pipeline/source.py wraps this in Spark's writer API).

Each task writes its rows as one idempotent producer whose id is derived from what Spark
keeps stable across retries and replays: a batch write's id (made on the driver when the
write is planned) and the partition, or a streaming query's id, the micro-batch id and the
partition. Its seqs are the rows' indices in the partition, written in order in bulk
requests. A task that runs again first asks the owner where its producer stands
(`GET .../producers/{id}`) and skips every row up to there: those landed.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from core.topology_loader import load_topology
from global_meta import MetaStore
from pipeline.options import SinkOptions
from region.client import ProxyClient
from region.registry import live_urls

BULK_RECORDS = 200  # per request: within the owner's per-producer window of remembered seqs
WRITE_DEADLINE_S = 120.0  # a request retried (failover, redirects) this long before it fails


@dataclass(frozen=True, slots=True)
class SinkResult:
    """What one task did: its producer, rows written now, rows found landed before."""

    producer: int
    written: int
    skipped: int
    first_dlsn: str | None
    last_dlsn: str | None


def producer_id(*parts: str | int) -> int:
    """A 64-bit producer id from stable parts (the same parts give the same id anywhere)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class InjectedFailureError(RuntimeError):
    """The sink's failpoint fired (FAILPOINT_PROPERTY): a task failing mid-partition."""


def append_rows(
    options: SinkOptions, payloads: Iterable[bytes], producer: int, fail_after: int | None = None
) -> SinkResult:
    """Writes the payloads in order as producer `producer`; blocks until all are acknowledged.
    `fail_after`: raise InjectedFailureError once that many rows are acknowledged (testing)."""
    return asyncio.run(_append(options, iter(payloads), producer, fail_after))


async def proxy_urls(options: SinkOptions) -> list[str]:
    """The proxies given, or the region's live write proxies registered in ZooKeeper."""
    if options.proxies:
        return list(options.proxies)
    topology = load_topology(options.topology_path)
    async with await MetaStore.of(topology, options.region) as store:
        urls = await live_urls(store, "write", options.region)
    if not urls:
        raise RuntimeError(
            f"globelog sink: no write proxy of region {options.region} is registered in "
            "ZooKeeper; start the proxies (globelog serve write-proxy) or give option proxies"
        )
    return urls


async def _append(
    options: SinkOptions, payloads: Iterator[bytes], producer: int, fail_after: int | None
) -> SinkResult:
    urls = await proxy_urls(options)
    stream = options.stream
    async with ProxyClient(urls, options.namespace, deadline_s=WRITE_DEADLINE_S) as client:
        last = await client.producer_last_seq(stream, producer)
        resume = 0 if last is None else last + 1
        first_dlsn = last_dlsn = None
        written = skipped = 0
        seq = 0  # of the next row
        chunk: list[bytes] = []

        async def send() -> None:
            nonlocal first_dlsn, last_dlsn, written
            acked = await client.write_bulk(stream, chunk, producer=(producer, seq - len(chunk)))
            first_dlsn = first_dlsn or str(acked[0].dlsn)
            last_dlsn = str(acked[-1].dlsn)
            written += sum(1 for a in acked if not a.duplicate)
            chunk.clear()

        for payload in payloads:
            if seq < resume:
                skipped += 1
            else:
                chunk.append(payload)
            seq += 1
            if len(chunk) >= BULK_RECORDS:
                await send()
            if fail_after is not None and seq >= fail_after and not chunk:
                raise InjectedFailureError(
                    f"globelog sink: failpoint: failing after {seq} rows of producer "
                    f"{producer:#x} were acknowledged"
                )
        if chunk:
            await send()
    return SinkResult(producer, written, skipped, first_dlsn, last_dlsn)
