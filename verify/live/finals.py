"""The live failover run's final reads, after the last heal: every stream read in full in every
region through the region's read proxy (what users read through), bounded, and through the
ledger client (the library), each written to the history for the checker."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from core.dlsn import DLSN
from core.errors import GlobelogError
from localcluster.controller import Cluster
from localcluster.tails import PagedRecord, ProxyPages, proxy_url
from reader.log_reader import LogReader, ReaderConfig
from reader.session import read_session
from verify.live.recorder import Recorder, describe, operating_answer, owned
from verify.live.workload import READ_RETRY_S

# How long a region's read proxy has to serve a stream from its start to its acknowledged end
# once the run's final reads begin (the last fault was healed AFTER_LAST_HEAL_S and the
# tailing readers' catch-up before): a proxy that cannot is `read-unavailable` (docs/failover.md).
PROXY_READ_BOUND_S = 15.0
FINAL_PAGE_WAIT_MS = 200  # a page past the acknowledged end only shows nothing follows


async def proxy_final_reads(
    cluster: Cluster, namespace: str, streams: list[str], ends: dict[str, DLSN], rec: Recorder
) -> None:
    """Every stream through every region's read proxy at once, each bounded."""
    async with aiohttp.ClientSession() as http, asyncio.TaskGroup() as group:
        for region in cluster.topology.region_names:
            url = proxy_url(cluster, region, "read")
            for stream in streams:
                read = _proxy_final(http, url, namespace, region, stream, ends.get(stream), rec)
                group.create_task(owned(f"proxy-final-{region}-{stream}", read))


async def _proxy_final(
    http: aiohttp.ClientSession, url: str, namespace: str, region: str, stream: str,
    end: DLSN | None, rec: Recorder,
) -> None:  # fmt: skip
    """Pages from the stream's start until one comes back empty at or past `end` (the stream's
    acknowledged end, None when nothing was), or PROXY_READ_BOUND_S runs out. The history
    gets what was read, how the read ended and the last error answered; the checker judges."""
    pages = ProxyPages(http, url, namespace, stream)
    records: list[PagedRecord] = []
    last_answer = ""
    ended = f"the {PROXY_READ_BOUND_S:g} s bound ran out"
    began = time.monotonic()
    try:
        async with asyncio.timeout(PROXY_READ_BOUND_S):
            while True:
                try:
                    page = await pages.next(wait_ms=FINAL_PAGE_WAIT_MS)
                except GlobelogError as err:
                    if not operating_answer(err):
                        raise
                    last_answer = describe(err)
                    await asyncio.sleep(READ_RETRY_S)
                    continue
                records += page
                if not page and (end is None or (records and records[-1].dlsn >= end)):
                    ended = "read to the acknowledged end"
                    break
    except TimeoutError:
        pass
    detail = f"{ended} after {time.monotonic() - began:.1f} s"
    if last_answer:
        detail += f"; last error answered {last_answer}"
    rec.add(process=f"proxy-final-{region}", type="ok", f="proxy-final", stream=stream,
            region=region, records=[[str(r.dlsn), int(r.payload)] for r in records],
            bound_s=PROXY_READ_BOUND_S, detail=detail)  # fmt: skip


async def library_final_reads(
    cluster: Cluster, namespace: str, streams: list[str], rec: Recorder
) -> list[int]:
    """Every stream in full in every region through the ledger client; the ledger ids of
    every segment (for the ensemble audits)."""
    ledger_ids: list[int] = []
    for region in cluster.topology.region_names:
        async with read_session(cluster.topology, region, namespace) as session:
            for stream in streams:
                reader = await LogReader.open(
                    session.streams, session.ledgers, stream, None, ReaderConfig(follow=False)
                )
                async with reader:
                    records = [[str(r.dlsn), int(r.payload)] async for r in reader]
                rec.add(process=f"final-{region}", type="ok", f="final", stream=stream,
                        region=region, records=records)  # fmt: skip
                if region == cluster.topology.region_names[0]:
                    segments = await session.streams.segments(stream)
                    ledger_ids += [v.segment.ledger_id for v in segments]
    return ledger_ids
