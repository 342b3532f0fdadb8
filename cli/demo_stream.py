"""The stream part of `make demo`: a stream written from one region across segment rolls,
tailed from two others, its writer killed and replaced (fencing and recovery shown), and a
read positioned by txid."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

from cli.cluster.controller import Cluster
from cli.stream_commands import Session, print_segments, segments_report, session
from core.errors import StreamError
from core.records import LogRecord
from reader.log_reader import LogReader, ReaderConfig
from reader.positions import By, Position

STREAM = "demo-orders"
RECORDS_PER_WRITER = 300
ROLL_BYTES = 8 * 1024  # small segments, so the demo rolls several times
SESSION_TIMEOUT_S = 2.0  # the writer process's ZooKeeper session: how soon its lock goes
AWAIT_S = 120.0  # bound on every wait of the demo


def writer_process(cluster: Cluster, owner: str) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "cli.main", "write", STREAM,
        "--topology", str(cluster.topology_path), "--region", "us-east", "--owner", owner,
        "--segment-roll-bytes", str(ROLL_BYTES), "--lock-timeout-s", "30",
        "--zk-session-timeout-s", str(SESSION_TIMEOUT_S),
    ]  # fmt: skip
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


async def feed(process: subprocess.Popen[bytes], first: int, count: int) -> list[dict[str, Any]]:
    """Writes `count` order records and waits for each acknowledgement line."""
    assert process.stdin is not None and process.stdout is not None
    body = "".join(
        json.dumps({"order": i, "pad": "x" * 80}) + "\n" for i in range(first, first + count)
    )
    process.stdin.write(body.encode())
    process.stdin.flush()
    acks = []
    for _ in range(count):
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), AWAIT_S)
        if not line:
            stderr = process.stderr.read().decode() if process.stderr else ""
            raise StreamError(f"the demo writer exited: {stderr}")
        acks.append(json.loads(line))
    return acks


async def tail(s: Session, count: int, latencies_ms: list[float]) -> list[LogRecord]:
    reader = await LogReader.open(s.streams, s.ledgers, STREAM, Position.earliest(), ReaderConfig())
    got: list[LogRecord] = []
    async with reader:
        while len(got) < count:
            record = await reader.read_next(timeout_s=AWAIT_S)
            assert record is not None
            got.append(record)
            latencies_ms.append(time.time() * 1000 - record.write_time_ms)
    return got


async def stream_demo(cluster: Cluster) -> None:
    topology = cluster.topology
    total = 2 * RECORDS_PER_WRITER
    async with (
        session(topology, "us-east", "default") as east,
        session(topology, "eu-west", "default") as eu,
        session(topology, "us-west", "default") as west,
    ):
        await east.streams.create_stream(STREAM)
        print(f"  stream {STREAM!r} created; segments roll every {ROLL_BYTES} bytes")
        lags: dict[str, list[float]] = {"eu-west": [], "us-west": []}
        tails = [
            asyncio.create_task(tail(eu, total, lags["eu-west"])),
            asyncio.create_task(tail(west, total, lags["us-west"])),
        ]
        first = writer_process(cluster, "writer-1")
        acks = await feed(first, 0, RECORDS_PER_WRITER)
        print(
            f"  writer-1 (us-east) acknowledged {len(acks)} records: {acks[0]['dlsn']} .. "
            f"{acks[-1]['dlsn']}, seq 0..{acks[-1]['seq']}"
        )
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=AWAIT_S)
        segments = await east.streams.segments(STREAM)
        open_segments = [v.segment.sequence for v in segments if v.segment.is_in_progress]
        print(
            f"  kill -9 writer-1: segment {open_segments} left in progress, owner lock still held"
        )
        started = time.monotonic()
        second = writer_process(cluster, "writer-2")
        more = await feed(second, RECORDS_PER_WRITER, RECORDS_PER_WRITER)
        took = time.monotonic() - started
        print(
            f"  writer-2 took over in {took:.1f} s (session timeout {SESSION_TIMEOUT_S} s, fencing "
            f"and recovery of segment {open_segments}), then wrote {more[0]['dlsn']} .. "
            f"{more[-1]['dlsn']}, seq {more[0]['seq']}..{more[-1]['seq']}"
        )
        assert second.stdin is not None
        second.stdin.close()
        second.wait(timeout=AWAIT_S)
        got = await asyncio.wait_for(asyncio.gather(*tails), AWAIT_S)
        for region, records in zip(lags, got, strict=True):
            orders = [json.loads(r.payload)["order"] for r in records]
            in_order = orders == list(range(total))
            print(
                f"  reader in {region}: {len(records)} records, every one once and in order: "
                f"{in_order}; from transmit to this reader: median "
                f"{statistics.median(lags[region]):.0f} ms"
            )
        await _positioned_read(east, more)
        print_segments(await segments_report(east, STREAM), sys.stdout)


async def _positioned_read(s: Session, acks: list[dict[str, Any]]) -> None:
    target = acks[len(acks) // 2]
    reader = await LogReader.open(
        s.streams,
        s.ledgers,
        STREAM,
        Position(By.TXID, int(target["txid"])),
        ReaderConfig(follow=False),
    )
    async with reader:
        record = await reader.read_next(timeout_s=AWAIT_S)
    assert record is not None
    print(
        f"  read from txid {target['txid']}: first record {record.dlsn} (seq {record.seq}, "
        f"txid {record.txid}), order {json.loads(record.payload)['order']}"
    )
