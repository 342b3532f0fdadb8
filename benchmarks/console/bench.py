"""`globelog bench console`: the web console's server time for its two heaviest pages.

A stream of --segments segments (each made the way a stream gains one in service: a write,
then the owner releases the stream, so the next write starts a new segment on a new ledger)
and a stream of --records records are written through the write proxies; then the console's
stream page (every segment, with its ledger's ensembles read and audited; rows for the newest
100) and a 500-record page of its record browser (read through the region's read proxy) are
asked for --samples times each, after one warming ask. The stream page is also asked cold:
each time after the console's cache of completed segments and closed ledgers aged out, so
every segment's and ledger's metadata is read from ZooKeeper again. Server time is what the
console's own `Server-Timing` header says; the round trip as the client saw it is beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable

import aiohttp

from benchmarks.harness import (
    add_cluster_arguments,
    bench_cluster,
    bench_progress,
    check_cluster_ports,
    run_on_bench_cluster,
)
from core.errors import ConfigError
from figures.percentiles import percentile
from localcluster.controller import Cluster
from localcluster.probes import operator_session
from localcluster.tools import find_tools
from region.client import ProxyClient

SEGMENTS_MAX = 5000
RECORDS_PER_BULK = 100
BROWSER_PAGE = 500
COLD_SAMPLES = 5
CACHE_AGED_S = 11.0  # past the console's FRESH_S: every completed segment is read again


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument("--segments", type=int, default=1000, help="segments of the long stream")
    parser.add_argument("--records", type=int, default=2000, help="records of the browsed stream")
    parser.add_argument("--samples", type=int, default=20, help="requests per page")
    parser.add_argument(
        "--namespace", default=None, help="reuse this namespace's streams when already written"
    )


def run(args: argparse.Namespace) -> int:
    args.region = "us-east"
    problems: list[str] = []
    cluster = dataclasses.replace(bench_cluster(args, problems), services=True)
    if not 1 <= args.segments <= SEGMENTS_MAX:
        problems.append(f"--segments {args.segments}: expected 1..{SEGMENTS_MAX}")
    if not BROWSER_PAGE <= args.records <= 1_000_000:
        problems.append(f"--records {args.records}: expected {BROWSER_PAGE}..1000000")
    if not 1 <= args.samples <= 1000:
        problems.append(f"--samples {args.samples}: expected 1..1000")
    if not any(r.consoles for r in cluster.topology.regions):
        problems.append(f"topology {cluster.topology.name!r} has no console (regions[].consoles)")
    if problems:
        raise ConfigError("bench console: " + "; ".join(problems))
    check_cluster_ports(cluster, args.use_running)
    tools = find_tools()
    progress = bench_progress("console")
    run_on_bench_cluster(
        cluster,
        args.use_running,
        tools,
        progress,
        lambda c: bench_console(
            c, args.segments, args.records, args.samples, progress, args.namespace
        ),
    )
    return 0


async def bench_console(
    cluster: Cluster,
    segments: int,
    records: int,
    samples: int,
    progress: Callable[[str], None],
    namespace: str | None = None,
) -> str:
    topology = cluster.topology
    region = next(r for r in topology.regions if r.consoles)
    console = topology.proxy_url(region.consoles[0])
    writer = topology.proxy_url(region.write_proxies[0])
    namespace = namespace or f"console{uuid.uuid4().hex[:6]}"
    async with (
        ProxyClient([writer], namespace, deadline_s=60) as client,
        operator_session(aiohttp.ClientTimeout(total=120)) as http,
    ):
        existing = set(await client.list_streams())
        have = int((await client.describe("long"))["segments"]) if "long" in existing else 0
        if "long" not in existing:
            await client.create("long")
        started = time.monotonic()
        for i in range(have, segments):
            await client.write("long", f"segment {i}".encode())
            async with http.post(
                f"{writer}/v1/namespaces/{namespace}/streams/long/release"
            ) as answer:
                answer.raise_for_status()
            if (i + 1) % 100 == 0:
                progress(f"{i + 1}/{segments} segments ({time.monotonic() - started:.0f} s)")
        if "wide" not in existing:
            await client.create("wide")
        for first in range(0 if "wide" not in existing else records, records, RECORDS_PER_BULK):
            count = min(RECORDS_PER_BULK, records - first)
            await client.write_bulk(
                "wide", [f'{{"n": {first + i}, "text": "record {first + i}"}}'.encode()
                         for i in range(count)]
            )  # fmt: skip
        progress(f"{records} records written; asking each page {samples} times")
        stream_page = f"{console}/streams/{namespace}/long"
        records_page = (
            f"{console}/api/streams/{namespace}/wide/records?from=earliest&max={BROWSER_PAGE}"
        )
        rows: list[tuple[str, list[float], list[float]]] = []
        api = f"{console}/api/streams/{namespace}/long"
        parts = (
            (f"stream page, {segments} segments", stream_page, "render"),
            ("  its timeline (every segment)", f"{api}/timeline", "render"),
            ("  its audit (every ledger)", f"{api}/audit", None),
        )
        progress(f"the stream page cold: {COLD_SAMPLES} asks, each once the cache aged out")
        cold: dict[str, tuple[list[float], list[float]]] = {what: ([], []) for what, _, _ in parts}
        for _ in range(COLD_SAMPLES):  # as a browser asks: the page, then its timeline, audit
            await asyncio.sleep(CACHE_AGED_S)
            for what, url, timing in parts:
                server, seen = await _ask(http, url, timing, 1, 0.0, warm_up=False)
                cold[what][0].extend(server)
                cold[what][1].extend(seen)
        for what, (server, seen) in cold.items():
            rows.append((f"{what}, cold", sorted(server), sorted(seen)))
        for what, url, timing in (
            *((f"{what}, warm", url, timing) for what, url, timing in parts),
            (f"record page, {BROWSER_PAGE} records", records_page, "proxy"),
            ("overview (from its last round)", f"{console}/api/overview", None),
        ):
            server, seen = await _ask(http, url, timing, samples)
            rows.append((what, server, seen))
    lines = [
        f"globelog bench console: topology {topology.name}, WAN profile {cluster.profile}, "
        f"console in {region.name}, each page asked {samples} times one after another",
        f"{'page':<40} {'server p50':>11} {'p90':>8} {'max':>8} {'client p50':>11} {'p90':>8}",
    ]
    for what, server, seen in rows:
        shown = (
            f"{percentile(server, 50):>9.1f}ms {percentile(server, 90):>6.1f}ms "
            f"{server[-1]:>6.1f}ms"
            if server
            else f"{'-':>11} {'-':>8} {'-':>8}"
        )
        lines.append(
            f"{what:<40} {shown} {percentile(seen, 50):>9.1f}ms {percentile(seen, 90):>6.1f}ms"
        )
    lines.append(
        "server time: the console's Server-Timing (the stream page: metadata reads, audit "
        "and HTML; the record page: the read proxy's answer included); client: the whole "
        "HTTPS exchange"
    )
    return "\n".join(lines)


async def _ask(
    http: aiohttp.ClientSession,
    url: str,
    timing: str | None,
    samples: int,
    pause_s: float = 0.0,
    warm_up: bool = True,
) -> tuple[list[float], list[float]]:
    """(server times, client round trips) in ms, sorted; the first answer is left out when
    `warm_up` (it fills the console's caches), and each ask waits `pause_s` first."""
    server, seen = [], []
    for _ in range(samples + int(warm_up)):
        await asyncio.sleep(pause_s)
        started = time.perf_counter()
        async with http.get(url) as answer:
            await answer.read()
            answer.raise_for_status()
            header = answer.headers.get("Server-Timing", "")
        seen.append((time.perf_counter() - started) * 1000)
        if timing is not None and header.startswith(f"{timing};dur="):
            server.append(float(header.split("dur=", 1)[1]))
    skip = int(warm_up)
    return sorted(server[skip:]), sorted(seen[skip:])
