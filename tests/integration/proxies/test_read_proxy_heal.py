"""A region isolated (ZooKeeper included) and healed, as its readers meet it: tails through the
region's read proxy reach the newest acknowledged record within seconds of the heal, and
while a stream cache is not following, the proxy's /v1/health says so (design.md I8).

The scenario of issue 22: an isolated region's read proxy lost its ZooKeeper session, its
stream caches stopped on "no ZooKeeper session" and never started again, so every read of
those streams there answered `metadata_unavailable` for good, while /v1/health said serving.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp

from localcluster import regions, wan
from localcluster.controller import Cluster
from region.client import Acked, ProxyClient
from tests.support.security import client_session
from tests.support.streams import fresh_namespace

STREAMS = ("s0", "s1")
REGION = "eu-west"  # isolated; the streams' owner is in us-east, writes go on there
ISOLATED_S = 9.0  # longer than the proxies' ZooKeeper session timeout, twice over
RECORDS_PER_PHASE = 30
WRITE_PACE_S = 0.05  # the background writer's pace: a steady trickle, not a flood
CATCH_UP_TIMEOUT_S = 20.0  # after the heal, the tails must reach the newest record by then
FIRST_READS_TIMEOUT_S = 30.0
HEALTH_POLL_S = 0.2
READ_WAIT_MS = 1000


def proxy_url(cluster: Cluster, region: str, kind: str) -> str:
    listed = cluster.topology.region(region)
    proxy = (listed.write_proxies if kind == "write" else listed.read_proxies)[0]
    return f"https://{proxy.endpoint.host}:{proxy.endpoint.port}"


@dataclass
class Tail:
    """What one HTTP tail of a stream through the read proxy has received."""

    seqs: list[int] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # error code -> answers
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def next_seq(self) -> int:
        return self.seqs[-1] + 1 if self.seqs else 0


async def tail(http: aiohttp.ClientSession, base: str, stream: str, into: Tail) -> None:
    """Long-polls the stream's pages for ever, as a reader of the read proxy would."""
    while True:
        params = {"from_seq": str(into.next_seq), "max": "1000", "wait_ms": str(READ_WAIT_MS)}
        try:
            async with http.get(f"{base}/{stream}/records", params=params) as answer:
                page = await answer.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            into.errors[type(err).__name__] = into.errors.get(type(err).__name__, 0) + 1
            await asyncio.sleep(HEALTH_POLL_S)  # pacing of retries, as ReadClient's
            continue
        if answer.status != 200:
            code = str(page.get("code"))
            into.errors[code] = into.errors.get(code, 0) + 1
            await asyncio.sleep(HEALTH_POLL_S)
            continue
        into.seqs += [int(record["seq"]) for record in page["records"]]
        into.arrived.set()


@dataclass
class Health:
    """Every /v1/health answer of the read proxy, with the time it came."""

    answers: list[tuple[float, dict[str, object]]] = field(default_factory=list)
    answered: asyncio.Event = field(default_factory=asyncio.Event)

    async def serving(self) -> None:
        """Waits for the next answer that says serving."""
        while True:
            self.answered.clear()
            await self.answered.wait()
            if self.answers[-1][1].get("state") == "serving":
                return


async def watch_health(http: aiohttp.ClientSession, url: str, into: Health) -> None:
    while True:
        try:
            async with http.get(url + "/v1/health") as answer:
                into.answers.append((time.monotonic(), await answer.json()))
                into.answered.set()
        except (aiohttp.ClientError, TimeoutError, ValueError):
            pass
        await asyncio.sleep(HEALTH_POLL_S)  # the polling pace


async def write_for(
    client: ProxyClient, until: asyncio.Event, acked: dict[str, list[Acked]]
) -> None:
    """Writes to every stream in turn until `until` is set. Idempotent: with the ZooKeeper
    leader in the isolated region, the election can outlast the owner's 1.5 s session, and a
    write in flight then is answered `outcome_unknown`; retried, it lands once."""
    producers = {stream: client.producer(stream) for stream in STREAMS}
    i = 0
    while not until.is_set():
        for stream in STREAMS:
            acked[stream].append(await producers[stream].write(f"during-{i}".encode()))
        i += 1
        await asyncio.sleep(WRITE_PACE_S)


async def reached(tails: dict[str, Tail], acked: dict[str, list[Acked]], timeout_s: float) -> float:
    """Seconds until every tail holds its stream's newest acknowledged record."""
    started = time.monotonic()
    async with asyncio.timeout(timeout_s):
        for stream, found in tails.items():
            while found.next_seq <= acked[stream][-1].seq:
                found.arrived.clear()
                await found.arrived.wait()
    return time.monotonic() - started


def degraded_streams(health: Health) -> set[str]:
    """Every stream a degraded health answer named as not followed."""
    named: set[str] = set()
    for _, body in health.answers:
        if body.get("state") == "degraded":
            followers = body.get("not_following", {})
            assert isinstance(followers, dict), body
            named |= set(followers)
    return named


async def test_an_isolated_regions_read_proxy_serves_its_streams_again_after_the_heal(
    services: Cluster,
) -> None:
    namespace = fresh_namespace()
    east = proxy_url(services, "us-east", "write")
    west = proxy_url(services, "us-west", "write")
    reads = proxy_url(services, REGION, "read")
    base = f"{reads}/v1/namespaces/{namespace}/streams"
    acked: dict[str, list[Acked]] = {s: [] for s in STREAMS}
    tails = {s: Tail() for s in STREAMS}
    health = Health()
    timeout = aiohttp.ClientTimeout(total=READ_WAIT_MS / 1000 + 10)
    async with (
        ProxyClient([east, west], namespace, deadline_s=60) as client,
        client_session(timeout=timeout) as http,
        asyncio.TaskGroup() as tasks,
    ):
        for stream in STREAMS:
            await client.create(stream)
            acked[stream] += [
                await client.write(stream, f"before-{i}".encode()) for i in range(RECORDS_PER_PHASE)
            ]
        readers = [tasks.create_task(tail(http, base, s, tails[s])) for s in STREAMS]
        watcher = tasks.create_task(watch_health(http, reads, health))
        await reached(tails, acked, FIRST_READS_TIMEOUT_S)

        stop_writing = asyncio.Event()
        writer = tasks.create_task(write_for(client, stop_writing, acked))
        await regions.isolate(services, REGION)
        try:
            await asyncio.sleep(ISOLATED_S)  # the outage itself: time is the fault here
        finally:
            await wan.heal(services.topology)
        healed = time.monotonic()
        stop_writing.set()
        await writer
        for stream in STREAMS:
            acked[stream] += [
                await client.write(stream, f"after-{i}".encode()) for i in range(RECORDS_PER_PHASE)
            ]
        newest = {s: acked[s][-1].seq for s in STREAMS}
        written = time.monotonic()
        try:
            await reached(tails, acked, CATCH_UP_TIMEOUT_S)
        except TimeoutError:
            where = {s: f"{tails[s].next_seq} of {newest[s] + 1}" for s in STREAMS}
            errors = {s: tails[s].errors for s in STREAMS}
            raise AssertionError(
                f"{CATCH_UP_TIMEOUT_S} s after the heal, {REGION}'s read proxy tails stood at "
                f"{where}; answers that were errors: {errors}; last health: {health.answers[-1][1]}"
            ) from None
        caught_up = time.monotonic()
        # Back to serving once every cache follows again.
        async with asyncio.timeout(CATCH_UP_TIMEOUT_S):
            await health.serving()
        for task in (*readers, watcher):
            task.cancel()

    degraded_at = [at for at, body in health.answers if body.get("state") == "degraded"]
    print(
        f"{REGION}'s read proxy reached the newest records {caught_up - healed:.1f} s after "
        f"the heal ({caught_up - written:.1f} s after the last acknowledgement); health said "
        f"degraded from {degraded_at[0] - healed + ISOLATED_S if degraded_at else 0:.1f} s "
        f"into the {ISOLATED_S} s cut to {degraded_at[-1] - healed if degraded_at else 0:.1f} s "
        "after the heal"
    )
    for stream in STREAMS:
        assert tails[stream].seqs == [a.seq for a in acked[stream]], (
            f"{stream}: every acknowledged record once, in order, through the read proxy"
        )
    assert degraded_streams(health) == {f"{namespace}/{s}" for s in STREAMS}, (
        "while its caches were not following, health said degraded and named them: "
        f"{[body for _, body in health.answers if body.get('state') != 'serving'][:3]}"
    )
