"""`globelog bench abuse`: hostile clients against a region's proxies while a canary is served.

On one cluster (every process on this machine, proxies with the topology's limits), a canary
client writes a record through us-east's write proxy every CANARY_PERIOD_S and reads it back
through us-east's read proxy, in a namespace of its own. Each attack runs for `--seconds`
against the same two proxies; before them, a baseline with no attack. For each phase: the
canary's write and read latency (p50, p99), the proxies' peak resident memory, and the
attack's answers by status and code. Goals (docs/benchmarks.md): each proxy's RSS stays under
RSS_CEILING_MIB, and the canary's p99 stays within 2x its baseline under every attack.

Attacks: slow connections (headers never finished), a flood of single writes, oversized
bodies, wide pages of large records, wide pages asked for on connections that then read
none of them (slow readers), reads of many streams and of names that do not exist,
tails past the cap, long polls, idempotent writes each under a new producer, and many streams
owned at once.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import ctypes
import dataclasses
import json
import multiprocessing
import os
import random
import signal
import socket
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from benchmarks.harness import (
    add_cluster_arguments,
    bench_cluster,
    bench_progress,
    check_cluster_ports,
    run_on_bench_cluster,
)
from core.errors import ConfigError, GlobelogError
from core.security.credentials import auth_headers, client_ssl, default_token
from figures.percentiles import percentile
from figures.plots import latency_over_time
from localcluster.controller import Cluster
from localcluster.probes import operator_session
from localcluster.processes import cpu_seconds, load_state
from localcluster.tails import proxy_url
from localcluster.tools import REPO_ROOT, find_tools
from region.bodies.batches import CONTENT_TYPE
from region.client import ProxyClient
from region.client.tokens import issue_token
from region.observability.telemetry import watch_loop_lag

REGION = "us-east"
CANARY_PERIOD_S = 0.02  # between the starts of the canary's rounds
CANARY_ROUND_S = 40.0  # a round's write and read-back end within this (deadline 30 s, wait 5 s)
CANARY_ROUNDS_MAX = 200  # rounds in flight at once
CANARY_WARMUP_S = 3.0  # rounds run before the baseline, not counted
RSS_CEILING_MIB = 1024  # per proxy process, under every attack (docs/benchmarks.md)
P99_FACTOR_MAX = 2.0
KIB, MIB = 1024, 1024 * 1024
STREAMS_READ = 1200  # past cache_streams_max (1000)
STREAMS_OWNED = 300
SLOW_READERS = 200  # connections holding a wide page each
SLOW_READER_HOLD_S = 35.0  # each held this long (the proxy's send_timeout_s is 30 s)
ATTACKER_OPS = ("read", "append", "create", "delete", "truncate")
# What an attacker's request can end in besides an answer, each counted by its name: under a
# churn of reset connections uvloop's client side sometimes finds a reused descriptor still
# held by a closing transport (RuntimeError) and refuses that connect.
ATTACK_FAULTS = (aiohttp.ClientError, TimeoutError, RuntimeError)
ATTACK_GRACE_S = 3.0  # an attack's requests left this long after its phase are cancelled
ATTACK_STOP_S = 35  # and end within this of their cancel


PR_SET_PDEATHSIG = 1  # prctl(2)


@dataclass
class Target:
    write_url: str
    read_url: str
    namespace: str  # the attacker's
    http: aiohttp.ClientSession
    source: str | None = None  # the attacker's own address (None: the system's choice)
    answers: Counter[str] = field(default_factory=Counter)

    def streams(self, base: str) -> str:
        return f"{base}/v1/namespaces/{self.namespace}/streams"

    async def note(self, answer: aiohttp.ClientResponse) -> None:
        code = ""
        if answer.status >= 400:
            try:
                code = str((await answer.json(content_type=None)).get("code", ""))
            except (ValueError, aiohttp.ClientError):
                code = "?"
        self.answers[f"{answer.status} {code}".strip()] += 1

    def failed(self, err: BaseException) -> None:
        self.answers[type(err).__name__] += 1


@dataclass
class Phase:
    name: str
    started_s: float = 0.0
    writes: list[tuple[float, float]] = field(default_factory=list)  # (at s, latency s)
    reads: list[tuple[float, float]] = field(default_factory=list)  # (at s, latency s)
    canary_errors: Counter[str] = field(default_factory=Counter)
    # the canary's read-backs that opened a connection: (at s, connect and handshake s)
    read_connects: list[tuple[float, float]] = field(default_factory=list)
    canary_lag_s: float = 0.0  # how late the canary's own loop ran, at most
    rss_mib: dict[str, float] = field(default_factory=dict)
    cpu_pct: dict[str, float] = field(default_factory=dict)  # of one core, over the attack
    answers: Counter[str] = field(default_factory=Counter)


Attack = Callable[[Target, asyncio.Event], Coroutine[Any, Any, None]]


async def _loops(count: int, stop: asyncio.Event, body: Callable[[int], Awaitable[None]]) -> None:
    async def loop(i: int) -> None:
        while not stop.is_set():
            await body(i)

    await asyncio.gather(*(loop(i) for i in range(count)))


async def _request(target: Target, method: str, url: str, **kwargs: object) -> None:
    try:
        async with target.http.request(method, url, **kwargs) as answer:  # type: ignore[arg-type]
            await target.note(answer)
    except ATTACK_FAULTS as err:
        target.failed(err)


async def slow_connections(target: Target, stop: asyncio.Event) -> None:
    """3000 connections that send a request line and then nothing (kept at that number)."""
    parts = urlsplit(target.write_url)
    host, port = parts.hostname or "", parts.port or 0
    tls = client_ssl() if parts.scheme == "https" else None
    held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def open_one() -> None:
        try:
            local = None if target.source is None else (target.source, 0)
            reader, writer = await asyncio.open_connection(host, port, ssl=tls, local_addr=local)
            writer.write(b"POST /v1/health HTTP/1.1\r\nHost: x\r\n")
            held.append((reader, writer))
        except OSError as err:
            target.failed(err)

    try:
        while not stop.is_set():
            alive = [(r, w) for r, w in held if not r.at_eof()]
            target.answers["closed by the proxy"] += len(held) - len(alive)
            held[:] = alive
            await asyncio.gather(*(open_one() for _ in range(3000 - len(held))))
            await asyncio.sleep(0.5)
    finally:  # (cancelled too: the next phase starts without them)
        for _, writer in held:
            writer.close()


async def flood(target: Target, stop: asyncio.Event) -> None:
    url = f"{target.streams(target.write_url)}/flood/records"
    await _loops(64, stop, lambda _: _request(target, "POST", url, data=b"x" * 100))


async def big_bodies(target: Target, stop: asyncio.Event) -> None:
    """Records over 1 MiB, sent with and without a Content-Length, and bulk bodies over 64 MiB."""
    url = target.streams(target.write_url)
    big = b"x" * (2 * MIB)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b"x" * 64 * KIB

    async def one(i: int) -> None:
        if i % 3 == 0:
            await _request(target, "POST", f"{url}/flood/records", data=big)
        elif i % 3 == 1:
            await _request(target, "POST", f"{url}/flood/records", data=chunks())
        else:
            headers = {"Content-Type": CONTENT_TYPE}
            await _request(target, "POST", f"{url}/flood/bulk", data=chunks(), headers=headers)

    await _loops(6, stop, one)


async def wide_pages(target: Target, stop: asyncio.Event) -> None:
    """Pages of max=10000 records of 512 KiB each, from the start, over and over."""
    url = f"{target.streams(target.read_url)}/wide/records"
    params = {"from_seq": "0", "max": "10000", "wait_ms": "0"}
    await _loops(8, stop, lambda _: _request(target, "GET", url, params=params))


async def slow_readers(target: Target, stop: asyncio.Event) -> None:
    """SLOW_READERS connections that each ask for a wide page (about 5.5 MB as sent), read its
    status and then nothing more, kept at that number: the read proxy holds what the kernel
    does not take of each page until its client reads it or the send deadline closes the
    connection. A connection is let go after SLOW_READER_HOLD_S (past the proxy's send
    deadline: a client that reads nothing does not see the proxy close it) and another
    opened; a refused request's connection at once."""
    parts = urlsplit(target.read_url)
    host, port = parts.hostname or "", parts.port or 0
    tls = client_ssl() if parts.scheme == "https" else None
    path = urlsplit(target.streams(target.read_url)).path + "/wide/records"
    head = "".join(f"{name}: {value}\r\n" for name, value in target.http.headers.items())
    request = (
        f"GET {path}?from_seq=0&max=10000&wait_ms=0 HTTP/1.1\r\nHost: {host}\r\n{head}\r\n"
    ).encode()
    held: list[tuple[float, asyncio.StreamWriter]] = []  # (opened at, its connection)
    loop = asyncio.get_running_loop()

    async def open_one() -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel takes little
        sock.setblocking(False)
        try:
            if target.source is not None:
                sock.bind((target.source, 0))
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
            reader, writer = await asyncio.open_connection(
                sock=sock, ssl=tls, server_hostname=host if tls else None
            )
        except BaseException as err:  # (cancelled at the phase's end too)
            sock.close()
            if not isinstance(err, OSError):
                raise
            target.failed(err)
            return
        try:
            writer.write(request)
            async with asyncio.timeout(30):
                status, code = await _status_of(reader)
        except BaseException as err:
            writer.close()
            if not isinstance(
                err, (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError)
            ):
                raise
            target.failed(err)
            return
        target.answers[f"{status} {code}".strip()] += 1
        if status == 200:
            held.append((loop.time(), writer))  # and nothing more of its page is read
        else:
            writer.close()

    try:
        while not stop.is_set():
            now = loop.time()
            for _, writer in (h for h in held if now - h[0] >= SLOW_READER_HOLD_S):
                writer.close()
            held[:] = [h for h in held if now - h[0] < SLOW_READER_HOLD_S]
            await asyncio.gather(*(open_one() for _ in range(SLOW_READERS - len(held))))
            await asyncio.sleep(0.5)
    finally:  # (cancelled too: the next phase starts without them)
        for _, writer in held:
            writer.close()


async def _status_of(reader: asyncio.StreamReader) -> tuple[int, str]:
    """An answer's status, and its error code when it is one (its body read)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if status < 400:
        return status, ""
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    body = await reader.readexactly(length)
    return status, str(json.loads(body).get("code", "")) if body else ""


async def many_streams(target: Target, stop: asyncio.Event) -> None:
    """Reads of STREAMS_READ streams from 0 (past the read-ahead cap), and of names that do not
    exist (each a new one)."""
    base = target.streams(target.read_url)
    names = iter(range(10**9))

    async def one(i: int) -> None:
        n = next(names)
        stream = f"m{n % STREAMS_READ}" if n % 4 else f"missing-{n}"
        await _request(target, "GET", f"{base}/{stream}/records", params={"from_seq": "0"})

    await _loops(16, stop, one)


async def tails(target: Target, stop: asyncio.Event) -> None:
    """1500 streamed tails at once (the cap is 1000)."""
    url = f"{target.streams(target.read_url)}/flood/tail"

    async def one(_: int) -> None:
        try:
            async with target.http.get(url, params={"from_seq": "0"}) as answer:
                await target.note(answer)
                if answer.status == 200:
                    while not stop.is_set():
                        async with asyncio.timeout(1):
                            await answer.content.readany()
        except ATTACK_FAULTS as err:
            target.failed(err)

    await _loops(1500, stop, one)


async def long_polls(target: Target, stop: asyncio.Event) -> None:
    url = f"{target.streams(target.read_url)}/quiet/records"
    params = {"from_seq": "1", "wait_ms": "30000"}

    async def one(_: int) -> None:
        try:
            async with asyncio.timeout(1.0):
                await _request(target, "GET", url, params=params)
        except TimeoutError:
            target.answers["waiting at the phase's end"] += 1

    await _loops(2000, stop, one)


async def producers(target: Target, stop: asyncio.Event) -> None:
    url = f"{target.streams(target.write_url)}/flood/records"

    async def one(_: int) -> None:
        producer = random.getrandbits(63)
        params = {"producer": str(producer), "producer_seq": "0"}
        await _request(target, "POST", url, data=b"p", params=params)

    await _loops(32, stop, one)


async def owned_streams(target: Target, stop: asyncio.Event) -> None:
    """Writes to STREAMS_OWNED streams in turn: each owned holds a writer, a ledger, a lock."""
    base = target.streams(target.write_url)
    names = iter(range(10**9))
    await _loops(
        8,
        stop,
        lambda _: _request(
            target, "POST", f"{base}/o{next(names) % STREAMS_OWNED}/records", data=b"o"
        ),
    )


ATTACKS: dict[str, Attack] = {
    "slow-connections": slow_connections,
    "write-flood": flood,
    "big-bodies": big_bodies,
    "wide-pages": wide_pages,
    "slow-readers": slow_readers,
    "many-streams": many_streams,
    "tails": tails,
    "long-polls": long_polls,
    "new-producers": producers,
    "owned-streams": owned_streams,
}


async def prepare(target: Target, attacks: list[str], progress: Callable[[str], None]) -> None:
    """The attacker's streams: flood, quiet (one record), wide (64 records of 512 KiB), and
    for the attacks that use them m0..m{STREAMS_READ} (one record each) and
    o0..o{STREAMS_OWNED}."""
    read = STREAMS_READ if "many-streams" in attacks else 0
    owned = STREAMS_OWNED if "owned-streams" in attacks else 0
    async with ProxyClient([target.write_url], target.namespace, deadline_s=120) as client:
        for name in ("flood", "quiet", "wide"):
            await client.create(name)
        await client.write("quiet", b"q")
        for _ in range(8):
            await client.write_bulk("wide", [os.urandom(512 * KIB) for _ in range(8)])
        if read or owned:
            progress(f"creating {read + owned} streams")
        for i in range(read):
            await client.create(f"m{i}")
            await client.write(f"m{i}", b"m")
            if i % 200 == 199:
                progress(f"  {i + 1} of {read} streams to read made")
        for i in range(owned):
            await client.create(f"o{i}")


@dataclass(frozen=True)
class Sample:
    """One canary round: when it began (time.monotonic, which every process of this machine
    shares), its write's latency and its read-back's, or the error that ended it."""

    at: float
    write_s: float | None = None
    read_s: float | None = None
    error: str | None = None
    read_connect_s: float | None = None  # the read-back opened a connection, in this long
    lag_s: float | None = None  # not a round: the canary's loop ran this late at `at`


class ConnectTimes:
    """How long each request traced with it spent opening a connection (TCP and TLS), for
    aiohttp's `trace_request_ctx`: a request served on a pooled connection spends none."""

    def __init__(self) -> None:
        self.config = aiohttp.TraceConfig()
        self.config.on_connection_create_start.append(self._began)
        self.config.on_connection_create_end.append(self._ended)

    async def _began(self, _: Any, context: Any, __: Any) -> None:
        if isinstance(context.trace_request_ctx, dict):  # a request traced with a dict
            context.trace_request_ctx["began"] = time.monotonic()

    async def _ended(self, _: Any, context: Any, __: Any) -> None:
        traced = context.trace_request_ctx
        if isinstance(traced, dict) and "began" in traced:
            traced["connect_s"] = time.monotonic() - traced.pop("began")


CANARY_LAG_NOTED_S = 0.01  # the canary's own loop lags from this on are sent back


async def canary(write_url: str, read_url: str, ready: Any, stop: Any) -> list[Sample]:
    """Starts a round every CANARY_PERIOD_S until `stop` (an event shared between processes)
    is set: a record written, then read back. Open loop: a round starts on time however long
    the earlier ones take (at most CANARY_ROUNDS_MAX at once, a round past that is counted
    as `backlog`), so a slow spell is sampled as often as a quick one rather than hidden
    behind it. `ready` is set once its stream exists and CANARY_WARMUP_S of rounds ran."""
    namespace = f"canary{uuid.uuid4().hex[:6]}"
    pages = f"{read_url}/v1/namespaces/{namespace}/streams/c/records"
    samples: list[Sample] = []
    connects = ConnectTimes()
    async with (
        ProxyClient([write_url], namespace, deadline_s=30, connector=unlimited) as client,
        operator_session(limit=0, trace=connects.config) as http,  # no round waits for one
    ):

        async def one_round(began: float) -> None:
            write_s = None
            try:
                async with asyncio.timeout(CANARY_ROUND_S):
                    acked = await client.write("c", b"canary")
                    written = time.monotonic()
                    write_s = written - began
                    params = {"from_seq": str(acked.seq), "max": "1", "wait_ms": "5000"}
                    traced: dict[str, float] = {}
                    async with http.get(pages, params=params, trace_request_ctx=traced) as answer:
                        body = await answer.json()
                        if answer.status != 200 or not body.get("records"):
                            raise GlobelogError(f"read answered {answer.status}: {body}")
                read_s = time.monotonic() - written
                samples.append(
                    Sample(began, write_s, read_s, read_connect_s=traced.get("connect_s"))
                )
            except Exception as err:  # noqa: BLE001 -- any failure is the round's sample, never lost
                code = str(getattr(err, "code", type(err).__name__))
                samples.append(Sample(began, write_s, None, code))

        await client.create("c")
        # Warmed up first, unmeasured: the first rounds open the pools' connections (a TLS
        # handshake each), which put the baseline's p99 at 60 ms and more in one run.
        warm_until = time.monotonic() + CANARY_WARMUP_S
        await open_loop(
            one_round, CANARY_PERIOD_S, CANARY_ROUNDS_MAX, lambda: time.monotonic() >= warm_until
        )
        samples.clear()
        ready.set()
        # the canary's own loop: a round it ran late is the bench's latency, not the proxies'
        lags = asyncio.ensure_future(
            watch_loop_lag(
                lambda lag: (
                    samples.append(Sample(time.monotonic(), lag_s=lag))
                    if lag >= CANARY_LAG_NOTED_S
                    else None
                )
            )
        )
        backlog = await open_loop(one_round, CANARY_PERIOD_S, CANARY_ROUNDS_MAX, stop.is_set)
        lags.cancel()
        samples += [Sample(at, None, None, "backlog") for at in backlog]
    return samples


async def open_loop(
    one_round: Callable[[float], Awaitable[None]],
    period_s: float,
    in_flight_max: int,
    stopped: Callable[[], bool],
) -> list[float]:
    """Starts `one_round(time.monotonic())` every `period_s` until `stopped()`, whether or
    not earlier rounds have ended (at most `in_flight_max` at once), then waits for those in
    flight; the start times of the rounds skipped for that bound."""
    rounds: set[asyncio.Task[None]] = set()
    skipped: list[float] = []
    due = time.monotonic()
    while not stopped():
        began = time.monotonic()
        if len(rounds) < in_flight_max:
            task = asyncio.ensure_future(one_round(began))
            rounds.add(task)
            task.add_done_callback(rounds.discard)
        else:
            skipped.append(began)
        due += period_s
        await asyncio.sleep(max(0.0, due - time.monotonic()))
    await asyncio.gather(*rounds)  # the caller bounds each round
    return skipped


def unlimited() -> aiohttp.BaseConnector:
    return aiohttp.TCPConnector(ssl=client_ssl(), limit=0)


def canary_process(write_url: str, read_url: str, ready: Any, stop: Any, out: Any) -> None:
    """The canary in a process of its own: the attacker's event loop, busy with thousands of
    connections, would otherwise delay the canary's, and its latency would be the bench's
    own rather than the proxies'."""
    out.send(asyncio.run(canary(write_url, read_url, ready, stop)))


def file_samples(samples: list[Sample], phases: list[Phase], origin: float) -> None:
    """Each sample to the phase in force when it began (a phase lasts until the next one
    starts, its settling time included)."""
    starts = [origin + phase.started_s for phase in phases]
    for sample in samples:
        index = bisect.bisect_right(starts, sample.at) - 1
        if index < 0:
            continue
        phase = phases[index]
        if sample.write_s is not None:
            phase.writes.append((sample.at - origin, sample.write_s))
        if sample.read_s is not None:
            phase.reads.append((sample.at - origin, sample.read_s))
        if sample.error is not None:
            phase.canary_errors[sample.error] += 1
        if sample.lag_s is not None:
            phase.canary_lag_s = max(phase.canary_lag_s, sample.lag_s)
        if sample.read_connect_s is not None:
            phase.read_connects.append((sample.at - origin, sample.read_connect_s))


async def attacker_token(write_url: str, namespace: str) -> str | None:
    """A token of the attacker's own subject, scoped to its namespace, when the deployment
    has tokens: quotas are kept per subject, and an attacker that shared the canary's would
    be throttling the canary with itself (with tokens off they are kept per client address
    and namespace, and the two namespaces differ)."""
    if default_token() is None:
        return None
    scope = {"namespaces": [namespace], "streams": ["*"], "ops": list(ATTACKER_OPS)}
    issued = await issue_token([write_url], f"attacker-{namespace}", scope, ttl_s=6 * 3600)
    return str(issued["token"])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def watch_rss(pids: dict[str, int], phase: Callable[[], Phase], stop: asyncio.Event) -> None:
    while not stop.is_set():
        current = phase()
        for name, pid in pids.items():
            current.rss_mib[name] = max(current.rss_mib.get(name, 0.0), rss_mib(pid))
        await asyncio.sleep(0.25)


async def attack_for(name: str, target: Target, seconds: float) -> Counter[str]:
    """Runs attack `name` for `seconds`, then lets its requests end for ATTACK_GRACE_S and
    cancels what is left (within ATTACK_STOP_S); its answers. Without the cancel a phase
    lasted as long as its slowest request: connects the kernel bar kept waiting were retried
    by the attacker's kernel for up to a minute, and the canary measured the phase for as
    long (half of the tails phase was after its attack's end)."""
    target.answers = Counter()
    ended = asyncio.Event()
    running = asyncio.create_task(ATTACKS[name](target, ended))
    await asyncio.sleep(seconds)
    ended.set()
    done, _ = await asyncio.wait({running}, timeout=ATTACK_GRACE_S)
    if not done:
        target.answers["cancelled at the phase's end"] += 1
        running.cancel()
        done, _ = await asyncio.wait({running}, timeout=ATTACK_STOP_S)
        if not done:
            target.answers["attack stopped late"] += 1
    if done and not running.cancelled():
        running.result()  # (an attack that failed says so)
    return target.answers


@dataclass(frozen=True)
class Attacker:
    """What the attacker's process needs: where to send, as whom, from which address, and at
    which niceness, and whether only on idle cores (SCHED_IDLE)."""

    write_url: str
    read_url: str
    namespace: str
    token: str | None
    source: str
    nice: int
    idle: bool


def attacker_process(spec: Attacker, pipe: Any) -> None:
    """The attacker in a process of its own, on asyncio's own event loop, at niceness
    `spec.nice`: it runs each attack `pipe` names, `(name, seconds)`, and sends back its
    answers, until it receives None.

    A process of its own, niced and on idle cores only (SCHED_IDLE), stands in for a host of
    its own: on this machine's two cores the attacker's CPU (thousands of connections made and
    dropped a second) would otherwise be taken from the proxies and the canary, which a remote
    attacker's is not. What the attack costs the proxies is still theirs, and each phase
    prints the attacker's CPU beside theirs.
    asyncio's loop rather than uvloop: under a churn of reset connections uvloop's client side
    has aborted the whole process."""
    if spec.nice or spec.idle:
        lower_priority(spec.nice, spec.idle)
    asyncio.run(_attacker(spec, pipe))


def lower_priority(nice: int, idle: bool) -> None:
    """Niceness `nice` for this process against every other of the machine and, with `idle`,
    the kernel's SCHED_IDLE policy: it then runs only on a core that nothing else wants, and
    any other process that wakes takes the core from it at once.

    Niceness alone left the proxies waiting: a nice 19 process that had a core when a proxy
    woke kept it until its slice ended (a few ms), and a proxy wakes hundreds of times a
    second; at an attack's start the read proxy waited 35 ms of 136 for a core while the
    attacker ran, with the cores not fully used (sampled from /proc/PID/schedstat).

    Where the kernel groups processes by session for scheduling (autogroup, on by default on
    most Linux desktops and servers: /proc/sys/kernel/sched_autogroup_enabled), a process's
    niceness weighs it only against the processes of its own session, and each session shares
    the cores evenly with every other, whatever its processes' niceness. Each process of a
    local cluster is a session of its own, so a niced attacker left in the benchmark's session
    took as much of the cores as a proxy did. The attacker makes a session of its own and
    gives it the same niceness; out of the benchmark's process group, it asks the kernel to
    end it when the benchmark ends (Ctrl-C no longer reaches it)."""
    os.setsid()
    _end_with_parent()
    autogroup = Path("/proc/self/autogroup")
    if autogroup.exists():
        try:
            autogroup.write_text(str(nice))
        except OSError as err:
            print(f"bench abuse: the attacker's autogroup kept its niceness ({err})", flush=True)
    os.nice(nice)
    if idle:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except (OSError, AttributeError) as err:
            print(f"bench abuse: the attacker is not SCHED_IDLE ({err})", flush=True)


def _end_with_parent() -> None:
    """SIGKILL to this process when its parent ends (Linux's PR_SET_PDEATHSIG), if libc has
    prctl; a parent ended before the call is seen at once."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


async def _attacker(spec: Attacker, pipe: Any) -> None:
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=60),
        headers=auth_headers(spec.token),
        connector=aiohttp.TCPConnector(ssl=client_ssl(), limit=0, local_addr=(spec.source, 0)),
    ) as http:
        target = Target(spec.write_url, spec.read_url, spec.namespace, http, spec.source)
        pipe.send("ready")
        while (command := await asyncio.to_thread(pipe.recv)) is not None:
            name, seconds = command
            pipe.send(dict(await attack_for(name, target, seconds)))


async def _answer(pipe: Any, within_s: float, what: str) -> Any:
    """What a child process sends next, within `within_s`; GlobelogError when it does not or
    when it died (its error is on stderr)."""
    try:
        if await asyncio.to_thread(pipe.poll, within_s):
            return pipe.recv()
    except EOFError:
        raise GlobelogError(
            f"bench abuse: {what}: its process ended (see its error above)"
        ) from None
    raise GlobelogError(f"bench abuse: {what} within {within_s:.0f} s")


async def run_phase(phase: Phase, attacker: Any, seconds: float, pids: dict[str, int]) -> None:
    """The phase's attack (none for the baseline) for `seconds` in the attacker's process;
    its answers, and the CPU the processes of `pids` spent meanwhile."""
    attacked = phase.name in ATTACKS
    if attacked:
        attacker.send((phase.name, seconds))
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    await asyncio.sleep(seconds)
    phase.cpu_pct = {
        name: (cpu_seconds(pid) - cpu_before[name]) / seconds * 100 for name, pid in pids.items()
    }
    if attacked:
        within_s = ATTACK_STOP_S + 30
        phase.answers = Counter(await _answer(attacker, within_s, f"{phase.name} did not end"))


def _cpu(phase: Phase, names: list[str]) -> str:
    """The write proxy's, the read proxy's and the attacker's CPU over the attack, in % of a
    core (the attacker shares this machine's cores: what it spends, the others lack)."""
    shares = [phase.cpu_pct.get(name) for name in (*names, "attacker")]
    return "/".join("-" if share is None else f"{share:.0f}" for share in shares)


def _connects(phase: Phase) -> str:
    """How many of the canary's read-backs opened a connection, and the longest opening (TCP
    and TLS handshake) in ms: a read-back on a pooled connection opens none."""
    if not phase.read_connects:
        return "0"
    return f"{len(phase.read_connects)}/{max(s for _, s in phase.read_connects) * 1000:.0f}ms"


def _ms(values: list[float], p: float) -> str:
    return f"{percentile(sorted(values), p) * 1000:.1f}" if values else "-"


async def bench_abuse(
    cluster: Cluster, args: argparse.Namespace, progress: Callable[[str], None]
) -> str:
    write_url, read_url = (proxy_url(cluster, REGION, kind) for kind in ("write", "read"))
    group = cluster.topology.region(REGION)
    names = [group.write_proxies[0].name, group.read_proxies[0].name]
    state = load_state(cluster.data_dir)
    pids = {name: state[name].pid for name in names}
    namespace = f"abuse{uuid.uuid4().hex[:6]}"
    spawn = multiprocessing.get_context("spawn")
    async with operator_session(aiohttp.ClientTimeout(total=60), limit=0) as http:
        progress("preparing the attacker's streams")
        await prepare(Target(write_url, read_url, namespace, http), args.attacks, progress)
        spec = Attacker(
            write_url,
            read_url,
            namespace,
            await attacker_token(write_url, namespace),
            args.attacker_address,
            args.attacker_nice,
            args.attacker_idle,
        )
    phases = [Phase("baseline"), *(Phase(name) for name in args.attacks)]
    current = [phases[0]]
    stop = asyncio.Event()
    ready, stop_canary = spawn.Event(), spawn.Event()
    received, sent = spawn.Pipe(duplex=False)
    canary_proc = spawn.Process(
        target=canary_process,
        args=(write_url, read_url, ready, stop_canary, sent),
        name="canary",
        daemon=True,
    )
    attacker, attacker_end = spawn.Pipe()
    attacker_proc = spawn.Process(
        target=attacker_process, args=(spec, attacker_end), name="attacker", daemon=True
    )
    watchers: list[asyncio.Task[None]] = []
    try:
        canary_proc.start()
        attacker_proc.start()
        sent.close()  # the children's ends: a child that dies is then seen (EOFError) at once
        attacker_end.close()
        if not await asyncio.to_thread(ready.wait, 60):
            raise GlobelogError("bench abuse: the canary's process did not start within 60 s")
        await _answer(attacker, 60, "the attacker's process did not start")
        watchers.append(asyncio.create_task(watch_rss(pids, lambda: current[0], stop)))
        origin = time.monotonic()
        for phase in phases:
            current[0] = phase
            phase.started_s = time.monotonic() - origin
            progress(f"{phase.name}, {args.seconds:.0f} s, from {time.strftime('%H:%M:%S')}")
            assert attacker_proc.pid is not None
            await run_phase(phase, attacker, args.seconds, {**pids, "attacker": attacker_proc.pid})
            await asyncio.sleep(2)  # the proxies settle before the next phase
        stop.set()
        stop_canary.set()
        attacker.send(None)
        await asyncio.gather(*watchers)
        file_samples(
            await _answer(received, 60, "the canary's process sent nothing"), phases, origin
        )
    finally:
        stop.set()
        await asyncio.gather(*watchers)
        for process in (canary_proc, attacker_proc):
            if process.pid is None:
                continue  # never started
            await asyncio.to_thread(process.join, 10)
            if process.is_alive():
                process.kill()
    return report(cluster, phases, names, args)


def report(
    cluster: Cluster, phases: list[Phase], names: list[str], args: argparse.Namespace
) -> str:
    baseline = phases[0]
    base_p99 = (
        percentile(sorted(latency for _, latency in baseline.writes), 99) if baseline.writes else 0
    )
    base_read_p99 = percentile(sorted(r for _, r in baseline.reads), 99) if baseline.reads else 0
    lines = [
        f"globelog bench abuse: topology {cluster.topology.name}, WAN profile {cluster.profile}, "
        f"{args.seconds:.0f} s per phase, proxies with the topology's limits",
        f"process layout: one machine, {os.cpu_count()} cores: 3 ZooKeeper, "
        f"{len(cluster.topology.bookies)} bookies (journal fsync before every ack), toxiproxy, "
        f"{len(cluster.topology.region_names) * 2} proxy processes, the attacker's process "
        f"(from {args.attacker_address}, nice {args.attacker_nice}"
        f"{', SCHED_IDLE' if args.attacker_idle else ''}, asyncio's loop), the "
        "canary's process (from 127.0.0.1), this process",
        f"canary: a round started every {CANARY_PERIOD_S * 1000:.0f} ms (open loop): a 6-byte "
        f"record written through {names[0]}, then read back through {names[1]}; goals: RSS < {RSS_CEILING_MIB} MiB per proxy, canary "
        f"p99 <= {P99_FACTOR_MAX:g}x baseline",
        "",
        f"  {'phase':<17} {'writes':>6} {'write p50/p99 ms':>17} {'read p50/p99 ms':>16} "
        f"{'wp RSS':>7} {'rp RSS':>7} {'CPU wp/rp/att':>14} {'read conns':>10} {'c lag':>6} {'goal':>5}  "
        "attack's answers / canary errors",
    ]
    for phase in phases:
        writes = [latency for _, latency in phase.writes]
        p99 = percentile(sorted(writes), 99) if writes else float("inf")
        reads = [latency for _, latency in phase.reads]
        read_p99 = percentile(sorted(reads), 99) if reads else float("inf")
        rss = [phase.rss_mib.get(n, 0.0) for n in names]
        met = (
            max(rss) < RSS_CEILING_MIB
            and p99 <= P99_FACTOR_MAX * base_p99
            and read_p99 <= P99_FACTOR_MAX * base_read_p99
            and not phase.canary_errors
        )
        answers = ", ".join(f"{k} x{v}" for k, v in phase.answers.most_common(5)) or "-"
        errors = ", ".join(f"{k} x{v}" for k, v in phase.canary_errors.most_common(3))
        lines.append(
            f"  {phase.name:<17} {len(writes):>6} {_ms(writes, 50):>8}/{_ms(writes, 99):<8} "
            f"{_ms(reads, 50):>7}/{_ms(reads, 99):<8} {rss[0]:>6.0f}M {rss[1]:>6.0f}M {_cpu(phase, names):>14} "
            f"{_connects(phase):>10} {phase.canary_lag_s * 1000:>6.0f} {'yes' if met or phase is baseline else 'NO':>5}  {answers}"
            + (f" / canary: {errors}" if errors else "")
        )
    writes_plot = Path(args.plot)
    reads_plot = writes_plot.with_name(f"{writes_plot.stem}-read{writes_plot.suffix}")
    for path, what, kind in ((writes_plot, "write", "writes"), (reads_plot, "read-back", "reads")):
        latency_over_time(
            path,
            f"bench abuse: canary {what} latency through each attack",
            {p.name: _series(getattr(p, kind)) for p in phases},
        )
    lines += [
        "",
        f"canary latency over time, by phase: {writes_plot} (writes), {reads_plot} (reads)",
    ]
    return "\n".join(lines)


def _series(points: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """(seconds since start, latency ms) of a phase's samples, for a plot."""
    return [at for at, _ in points], [latency * 1000 for _, latency in points]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument("--seconds", type=float, default=20.0, help="per phase")
    parser.add_argument(
        "--attacks",
        type=lambda text: text.split(","),
        default=list(ATTACKS),
        help=f"comma-separated, of {','.join(ATTACKS)}",
    )
    parser.add_argument("--plot", default=str(REPO_ROOT / "docs" / "img" / "bench-abuse.png"))
    parser.add_argument(
        "--attacker-nice",
        type=int,
        default=19,
        help="the attacker process's niceness: 19 (the default) stands in for an attacker on "
        "a host of its own, whose CPU is not the proxies'; 0 shares the cores evenly",
    )
    parser.add_argument(
        "--attacker-idle",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the attacker process runs only on cores nothing else wants (SCHED_IDLE), as an "
        "attacker on a host of its own takes no core from the proxies (the default)",
    )
    parser.add_argument(
        "--attacker-address",
        default="127.0.0.2",
        help="the loopback address the attacker's connections come from (the canary's is "
        "127.0.0.1): per-address limits tell the two apart as they would two hosts",
    )


def run(args: argparse.Namespace) -> int:
    args.region = REGION
    problems: list[str] = []
    cluster = dataclasses.replace(bench_cluster(args, problems), services=True)
    if not 5 <= args.seconds <= 600:
        problems.append(f"--seconds {args.seconds}: expected 5..600")
    if not 0 <= args.attacker_nice <= 19:
        problems.append(f"--attacker-nice {args.attacker_nice}: expected 0..19")
    if not args.attacker_address.startswith("127."):
        problems.append(f"--attacker-address {args.attacker_address}: expected a loopback address")
    unknown = [a for a in args.attacks if a not in ATTACKS]
    if unknown:
        problems.append(f"--attacks {unknown}: expected some of {list(ATTACKS)}")
    if problems:
        raise ConfigError("bench abuse: " + "; ".join(problems))
    check_cluster_ports(cluster, args.use_running)
    progress = bench_progress("abuse")
    run_on_bench_cluster(
        cluster, args.use_running, find_tools(), progress, lambda c: bench_abuse(c, args, progress)
    )
    return 0
