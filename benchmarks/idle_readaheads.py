"""What idle read-aheads cost a read proxy: its CPU, and that of the ZooKeeper nodes and bookies
it asks, while nothing is written.

Run from the repository root against a running local cluster (`globelog cluster up`):
    .venv/bin/python -m benchmarks.idle_readaheads --data-dir D [--streams N] [--seconds S]

It makes N streams of one record each in a namespace of its own (through us-east's write
proxy), reads each once through us-east's read proxy (so the proxy starts a read-ahead per
stream, a tailing reader that follows the stream), waits SETTLE_S (or --settle-s), then takes the CPU of the
read proxy, the ZooKeeper nodes and us-east's bookies over S seconds, in % of one core. A read
proxy keeps up to `cache_streams_max` (1 000) read-aheads, each for `cache_idle_s` (300 s)
after its last read: what one costs while its stream is idle bounds how many a proxy can hold.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path

from core.security.credentials import adopt_operator_credentials
from core.topology_loader import load_topology
from localcluster.probes import operator_session
from localcluster.processes import cpu_seconds, load_state
from region.client import ProxyClient

REGION = "us-east"
SETTLE_S = 10.0  # the read-aheads reach the end of their streams and their checks slow down


def progress(text: str) -> None:
    print(f"idle read-aheads: {text}", file=sys.stderr, flush=True)


async def measure(args: argparse.Namespace) -> str:
    topology = load_topology(args.topology)
    adopt_operator_credentials(topology.security)
    state = load_state(Path(args.data_dir))
    group = topology.region(REGION)
    read_name = group.read_proxies[0].name
    watched = {read_name: state[read_name].pid}
    watched |= {n: s.pid for n, s in state.items() if n.startswith("zk-") and "relay" not in n}
    watched |= {b.name: state[b.name].pid for b in topology.bookies if b.region == REGION}
    write_url, read_url = (
        topology.proxy_url(p[0]) for p in (group.write_proxies, group.read_proxies)
    )
    namespace = f"idle{uuid.uuid4().hex[:6]}"
    async with (
        ProxyClient([write_url], namespace, deadline_s=60) as client,
        operator_session() as http,
    ):
        progress(f"making {args.streams} streams of one record")
        for i in range(args.streams):
            await client.create(f"s{i}")
            await client.write(f"s{i}", b"x")
        base = f"{read_url}/v1/namespaces/{namespace}/streams"
        began = time.monotonic()
        for i in range(args.streams):
            params = {"from_seq": "0", "wait_ms": "2000"}
            while True:  # within the read quota: a refusal is waited out as it asks
                async with http.get(f"{base}/s{i}/records", params=params) as answer:
                    page = await answer.json()
                    if answer.status != 429:
                        break
                    await asyncio.sleep(float(answer.headers.get("Retry-After", "1")))
            if answer.status != 200 or not page["records"]:
                raise SystemExit(f"reading s{i}: {answer.status} {page}")
        opened_s = time.monotonic() - began
        progress(
            f"{args.streams} read-aheads started in {opened_s:.1f} s; {args.settle_s:.0f} s idle"
        )
        await asyncio.sleep(args.settle_s)
        before = {name: cpu_seconds(pid) for name, pid in watched.items()}
        progress(f"measuring for {args.seconds:.0f} s")
        await asyncio.sleep(args.seconds)
        used = {n: (cpu_seconds(p) - before[n]) / args.seconds * 100 for n, p in watched.items()}
    lines = [
        f"idle read-aheads: {args.streams} streams of one record read once each through "
        f"{read_name} (read-aheads started in {opened_s:.1f} s), then {args.seconds:.0f} s idle",
        "process layout: the running local cluster on this machine (every process on its "
        "cores); CPU in % of one core over the idle seconds",
        "",
        f"  {'process':<12} {'CPU %':>7}",
    ]
    lines += [f"  {name:<12} {share:>7.1f}" for name, share in used.items()]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.idle_readaheads")
    parser.add_argument("--topology", default="topology.yaml")
    parser.add_argument("--data-dir", required=True, help="the running cluster's")
    parser.add_argument("--streams", type=int, default=150)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--settle-s", type=float, default=SETTLE_S,
        help="idle time before measuring (past cache_follow_idle_s: paused read-aheads)",
    )  # fmt: skip
    args = parser.parse_args()
    if not 1 <= args.streams <= 1000:
        parser.error(f"--streams {args.streams}: expected 1..1000 (cache_streams_max)")
    print(asyncio.run(measure(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
