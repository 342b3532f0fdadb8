"""A failover run's final reads, after the last heal: every stream read in full in every
region through the region's read proxy (what users read through) and through the ledger client
(the library), each bounded and written to the history however it ended, a data loss the
reader reports included, for the checker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from core import runtime
from core.dlsn import DLSN
from core.errors import DataLossError, GlobelogError
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient
from reader.log_reader import LogReader, ReaderConfig
from reader.session import ReadSession
from verify.run.deployment import Deployment
from verify.run.pages import PagedRecord, ProxyPages
from verify.run.recorder import Recorder, describe, operating_answer, owned
from verify.run.workload import READ_RETRY_S

# How long a region's read proxy has to serve a stream from its start to its acknowledged end
# once the run's final reads begin (the last fault was healed AFTER_LAST_HEAL_S and the
# tailing readers' catch-up before): a proxy that cannot is `read-unavailable` (docs/failover.md).
PROXY_READ_BOUND_S = 15.0
# How long the library has to read a stream in full, after the reads through the proxies: past
# the reader's own retries of bookies that do not answer (reader/log_reader.py, about a minute),
# so a read that cannot go on says why before the bound runs out. One that does not end is in
# the history as such, and the checker calls it `read-unavailable`.
LIBRARY_READ_BOUND_S = 90.0
FINAL_PAGE_WAIT_MS = 200  # a page past the acknowledged end only shows nothing follows


async def proxy_final_reads(
    deployment: Deployment, namespace: str, streams: list[str], ends: dict[str, DLSN],
    rec: Recorder,
) -> None:  # fmt: skip
    """Every stream through every region's read proxy at once, each bounded."""
    async with (
        deployment.http() as http,
        asyncio.TaskGroup() as group,
    ):
        for region in deployment.topology.region_names:
            url = deployment.read_url(region)
            for stream in streams:
                read = _proxy_final(http, url, namespace, region, stream, ends.get(stream), rec)
                group.create_task(
                    owned(f"proxy-final-{region}-{stream}", deployment.in_region(region, read))
                )


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
    began = runtime.monotonic()
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
    detail = f"{ended} after {runtime.monotonic() - began:.1f} s"
    if last_answer:
        detail += f"; last error answered {last_answer}"
    rec.add(process=f"proxy-final-{region}", type="ok", f="proxy-final", stream=stream,
            region=region, records=[[str(r.dlsn), int(r.payload)] for r in records],
            bound_s=PROXY_READ_BOUND_S, detail=detail)  # fmt: skip


async def library_final_reads(
    deployment: Deployment, namespace: str, streams: list[str], rec: Recorder
) -> list[int]:
    """Every stream in full in every region through the ledger client, each read bounded and
    written to the history however it ended; the ledger ids of every segment (for the
    ensemble audits). An error answered (no ZooKeeper, no bookie) ends that region's reads
    in the history; any other error is raised: the run fails."""
    ledger_ids: list[int] = []
    listed: set[str] = set()  # the streams whose segments were listed for the audits
    for region in deployment.topology.region_names:
        reads = _library_region(deployment, namespace, region, streams, listed, rec)
        ledger_ids += await deployment.in_region(region, reads)
    return ledger_ids


@asynccontextmanager
async def read_session(
    deployment: Deployment, region: str, namespace: str
) -> AsyncIterator[ReadSession]:
    """A reading process's connections in `region`, as the deployment makes them."""
    async with (
        deployment.meta_session(region) as store,
        await LedgerClient.connect(store, deployment.ledger_config(region)) as ledgers,
    ):
        yield ReadSession(StreamMetaStore(store, namespace), ledgers)


async def _library_region(
    deployment: Deployment, namespace: str, region: str, streams: list[str], listed: set[str],
    rec: Recorder,
) -> list[int]:  # fmt: skip
    """One region's reads of every stream; the ledger ids of the streams not `listed` yet."""
    ledger_ids: list[int] = []
    unread = list(streams)
    try:
        async with read_session(deployment, region, namespace) as session:
            while unread:
                await _library_final(session, region, unread[0], rec)
                stream = unread.pop(0)
                if stream not in listed:
                    segments = await session.streams.segments(stream)
                    ledger_ids += [v.segment.ledger_id for v in segments]
                    listed.add(stream)
    except GlobelogError as err:
        if not operating_answer(err):
            raise
        for stream in unread:
            rec.add(process=f"final-{region}", type="info", f="final", stream=stream,
                    region=region, records=[], bound_s=LIBRARY_READ_BOUND_S,
                    detail=f"not read: {describe(err)}")  # fmt: skip
    return ledger_ids


async def _library_final(session: ReadSession, region: str, stream: str, rec: Recorder) -> None:
    """One stream from its start to its end as it is, through a LogReader that does not
    follow, at most LIBRARY_READ_BOUND_S. A range the reader reports lost (DataLossError, once
    per range) goes into the history with the read, which goes on after it; a read that did
    not end (the bound, or an error answered) is `info` with what it read until then."""
    records: list[list[str | int]] = []
    lost: list[list[str]] = []
    ended = "read to the end"
    began = runtime.monotonic()
    try:
        async with asyncio.timeout(LIBRARY_READ_BOUND_S):
            reader = await LogReader.open(
                session.streams, session.ledgers, stream, None, ReaderConfig(follow=False)
            )
            async with reader:
                while True:
                    try:
                        record = await reader.read_next()
                    except DataLossError as err:
                        lost.append([err.first, err.last])
                        continue
                    if record is None:
                        break
                    records.append([str(record.dlsn), int(record.payload)])
    except TimeoutError:
        ended = f"the {LIBRARY_READ_BOUND_S:g} s bound ran out"
    except GlobelogError as err:
        if not operating_answer(err):
            raise
        ended = f"stopped by {describe(err)}"
    detail = f"{ended} after {runtime.monotonic() - began:.1f} s"
    detail += "".join(f"; data lost from {first} to {last}" for first, last in lost)
    rec.add(process=f"final-{region}", type="ok" if ended == "read to the end" else "info",
            f="final", stream=stream, region=region, records=records, lost=lost,
            bound_s=LIBRARY_READ_BOUND_S, detail=detail)  # fmt: skip
