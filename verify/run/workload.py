"""A failover run's workload: producers appending unique values through the write
proxies, readers tailing every stream through each region's read proxy, and the frontier of
what was acknowledged and read that the run waits on before its final reads."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import aiohttp

from core.dlsn import DLSN
from core.errors import GlobelogError, OutcomeUnknownError
from verify.run.deployment import Deployment
from verify.run.pages import ProxyPages
from verify.run.recorder import Recorder, answered, operating_answer

SEND_DEADLINE_S = 20.0
READ_RETRY_S = 0.5  # after an error answered (or none), as ReadClient and the demo's readers


@dataclass
class Frontier:
    """Each stream's highest acknowledged DLSN, and how far each region's tailing reader has
    read it; `moved` is set whenever a reader advances."""

    acked: dict[str, DLSN] = field(default_factory=dict)
    read: dict[tuple[str, str], DLSN | None] = field(default_factory=dict)  # (region, stream)
    moved: asyncio.Event = field(default_factory=asyncio.Event)

    def acknowledged(self, stream: str, dlsn: DLSN) -> None:
        if stream not in self.acked or dlsn > self.acked[stream]:
            self.acked[stream] = dlsn

    def advanced(self, region: str, stream: str, dlsn: DLSN) -> None:
        self.read[(region, stream)] = dlsn
        self.moved.set()

    def behind(self) -> list[str]:
        """The tailing readers short of their stream's acknowledged end, as `where of end`."""
        found = []
        for (region, stream), at in sorted(self.read.items()):
            end = self.acked.get(stream)
            if end is not None and (at is None or at < end):
                found.append(f"r-{region}-{stream} at {at or 'the start'} of {end}")
        return found

    async def caught_up(self, bound_s: float) -> list[str]:
        """Waits until every tailing reader reached its stream's acknowledged end, at most
        `bound_s`; the readers still behind then (none when all caught up)."""
        try:
            async with asyncio.timeout(bound_s):
                while self.behind():
                    self.moved.clear()
                    await self.moved.wait()
        except TimeoutError:
            pass
        return self.behind()


async def produce(
    deployment: Deployment, namespace: str, region: str, stream: str, idempotent: bool,
    interval_s: float, rec: Recorder, frontier: Frontier, values: list[int], stop: asyncio.Event,
) -> None:  # fmt: skip
    """One producer per region and stream, so a stream stalled by a fault does not stop the
    sends to the others. An operating answer ends the send as the client says: `info` (it may
    have landed: OutcomeUnknownError) or `fail` (it did not); any other error ends the
    producer, and the run with it."""
    urls = deployment.write_urls(region)
    process = f"w-{region}-{stream}"
    async with deployment.client(urls, namespace, SEND_DEADLINE_S) as client:
        producer = client.producer(stream)
        while not stop.is_set():
            values[0] += 1
            value = values[0]
            rec.add(process=process, type="invoke", f="send", stream=stream, value=value,
                    idempotent=idempotent)  # fmt: skip
            try:
                payload = str(value).encode()
                if idempotent:
                    acked = await producer.write(payload)
                else:
                    acked = await client.write(stream, payload)
            except GlobelogError as err:
                if not operating_answer(err):
                    raise
                # The client raises OutcomeUnknownError when the write may have landed; any
                # other error means it certainly did not (docs/http-api.md, "Errors").
                done = "info" if isinstance(err, OutcomeUnknownError) else "fail"
                rec.add(process=process, type=done, f="send", stream=stream, value=value,
                        **answered(err))  # fmt: skip
            else:
                rec.add(process=process, type="ok", f="send", stream=stream, value=value,
                        dlsn=str(acked.dlsn), proxy=client.served_by(stream))  # fmt: skip
                frontier.acknowledged(stream, acked.dlsn)
            await asyncio.sleep(interval_s)


async def tail(
    http: aiohttp.ClientSession, deployment: Deployment, namespace: str, region: str,
    stream: str, rec: Recorder, frontier: Frontier, stop: asyncio.Event,
) -> None:  # fmt: skip
    """Long-polls one stream from its start through the region's read proxy, a page at a
    time, until `stop`: each page is a `poll` in the history, each error answered (or no
    answer) a failed one, retried after READ_RETRY_S as a user's reader would. An answer
    that is not an operating one ends the reader, and the run with it."""
    process = f"r-{region}-{stream}"
    pages = ProxyPages(http, deployment.read_url(region), namespace, stream)
    frontier.read[(region, stream)] = None
    while not stop.is_set():
        try:
            page = await pages.next()
        except GlobelogError as err:
            if not operating_answer(err):
                raise
            rec.add(process=process, type="fail", f="poll", stream=stream, region=region,
                    **answered(err))  # fmt: skip
            await asyncio.sleep(READ_RETRY_S)
            continue
        if page:
            rec.add(process=process, type="ok", f="poll", stream=stream, region=region,
                    records=[[str(r.dlsn), int(r.payload)] for r in page])  # fmt: skip
            frontier.advanced(region, stream, page[-1].dlsn)
