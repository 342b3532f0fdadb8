"""Ownership on the real cluster: a killed writer process is replaced, a paused one is fenced,
and two writers racing for one stream end with exactly one owner."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from core.errors import (
    EndOfStreamError,
    MetadataUnavailableError,
    OwnerFencedError,
    OwnershipError,
)
from core.records import Record
from global_meta.streams import StreamMetaStore
from ledger.codecs.metadata import LedgerState
from localcluster.controller import Cluster
from tests.support.streams import fresh_namespace, stream_env

SESSION_TIMEOUT_S = 1.0  # the writer process's ZooKeeper session: how soon its lock goes
AWAIT_BOUND_S = 60.0  # every await in these tests ends well within this (I8)


@contextmanager
def writer_process(
    cluster: Cluster, namespace: str, stream: str
) -> Iterator[subprocess.Popen[bytes]]:
    """`globelog write` in us-east, fed through a pipe, one record per line."""
    command = [
        sys.executable, "-m", "cli.main", "write", stream,
        "--topology", str(cluster.topology_path), "--namespace", namespace,
        "--region", "us-east", "--zk-session-timeout-s", str(SESSION_TIMEOUT_S),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


async def feed(process: subprocess.Popen[bytes], lines: list[str]) -> list[dict[str, object]]:
    """Writes lines to the process and returns one acknowledgement per line, in order."""
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout
    stdin.write("".join(f"{line}\n" for line in lines).encode())
    stdin.flush()
    acks = []
    for _ in lines:
        line = await asyncio.wait_for(asyncio.to_thread(stdout.readline), AWAIT_BOUND_S)
        assert line, f"the writer exited: {process.stderr.read() if process.stderr else b''!r}"
        acks.append(json.loads(line))
    return acks


async def test_a_killed_writer_is_replaced_and_every_acknowledged_record_is_read_once(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with stream_env(cluster, "us-west", namespace) as west:
        await west.streams.create_stream("s")
        with writer_process(cluster, namespace, "s") as process:
            first = [f"a{i}" for i in range(40)]
            acks = await feed(process, first)
            os.kill(process.pid, signal.SIGKILL)
        # The dead writer's lock goes with its session; the new owner waits for it.
        writer = await west.writer("s", lock_timeout_s=30)
        second = [f"b{i}" for i in range(20)]
        written = await writer.write_bulk([s.encode() for s in second])
        await writer.close()
        assert written[0].seq == len(first), "sequence ids continue across owners"
        assert written[0].dlsn.segment > int(str(acks[-1]["dlsn"]).split(".")[0])
        reader = await west.reader("s", follow=False)
        async with reader:
            records = [r async for r in reader]
        assert [r.payload.decode() for r in records] == first + second
        assert [r.seq for r in records] == list(range(len(first) + len(second)))
        assert [str(r.dlsn) for r in records[: len(first)]] == [a["dlsn"] for a in acks]


async def test_a_paused_writer_is_fenced_when_it_resumes(cluster: Cluster) -> None:
    namespace = fresh_namespace()
    async with stream_env(cluster, "eu-west", namespace) as eu:
        await eu.streams.create_stream("s")
        with writer_process(cluster, namespace, "s") as process:
            acks = await feed(process, [f"old{i}" for i in range(10)])
            os.kill(process.pid, signal.SIGSTOP)
            try:
                writer = await eu.writer("s", lock_timeout_s=30)
                await writer.write_bulk([b"new0", b"new1"])
            finally:
                os.kill(process.pid, signal.SIGCONT)
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(b"late0\nlate1\n")
            process.stdin.flush()
            process.stdin.close()
            rest = await asyncio.wait_for(asyncio.to_thread(process.stdout.read), AWAIT_BOUND_S)
            code = await asyncio.wait_for(asyncio.to_thread(process.wait), AWAIT_BOUND_S)
            stderr = process.stderr.read().decode() if process.stderr else ""
        assert rest == b"", f"the fenced writer acknowledged {rest!r}"
        assert code != 0 and "owner_fenced" in stderr, (code, stderr)
        await writer.write(Record(b"new2"))
        await writer.close()
        reader = await eu.reader("s", follow=False)
        async with reader:
            payloads = [r.payload async for r in reader]
        assert payloads == [f"old{i}".encode() for i in range(10)] + [b"new0", b"new1", b"new2"]
        assert len(acks) == 10


async def test_two_writers_racing_for_a_stream_end_with_one_owner(cluster: Cluster) -> None:
    namespace = fresh_namespace()
    async with (
        stream_env(cluster, "us-east", namespace) as east,
        stream_env(cluster, "us-west", namespace) as west,
    ):
        await east.streams.create_stream("s")
        outcomes = await asyncio.wait_for(
            asyncio.gather(east.writer("s"), west.writer("s"), return_exceptions=True),
            AWAIT_BOUND_S,
        )
        winners = [o for o in outcomes if not isinstance(o, BaseException)]
        losers = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(winners) == 1 and len(losers) == 1, outcomes
        assert isinstance(losers[0], OwnershipError)
        assert "is owned by" in str(losers[0]) and losers[0].owner
        await winners[0].write(Record(b"only"))
        await winners[0].close()
        # Once released, the stream can be taken again.
        again = await west.writer("s")
        await again.close()


async def test_a_writer_that_lost_its_ledger_to_a_new_owner_fails_every_write(
    cluster: Cluster,
) -> None:
    """In-process variant: the old owner keeps running while a new owner fences its segment
    (its lock removed by hand, as an expired session would)."""
    namespace = fresh_namespace()
    async with (
        stream_env(cluster, "us-east", namespace) as east,
        stream_env(cluster, "us-west", namespace) as west,
    ):
        await east.streams.create_stream("s")
        old = await east.writer("s")
        await old.write(Record(b"before"))
        await east.streams.release(old._lock)  # the old owner's session "expired"
        new = await west.writer("s")
        with pytest.raises(OwnerFencedError):
            await asyncio.wait_for(old.write_bulk([b"bulk"] * 500), AWAIT_BOUND_S)
        with pytest.raises(OwnerFencedError):
            await asyncio.wait_for(old.write(Record(b"after")), AWAIT_BOUND_S)
        with pytest.raises(OwnerFencedError):
            await asyncio.wait_for(old.close(), AWAIT_BOUND_S)
        await new.write(Record(b"new"))
        await new.close()
        reader = await west.reader("s", follow=False)
        async with reader:
            assert [r.payload async for r in reader] == [b"before", b"new"]


async def test_a_sealed_streams_next_writer_gets_end_of_stream_and_leaves_no_ledger(
    cluster: Cluster,
) -> None:
    """A new owner makes its segment's ledger while it recovers the last segment: when that
    segment turns out sealed (or anything else ends the start), the ledger made meanwhile is
    deleted, not left behind."""
    async with stream_env(cluster, "us-east", fresh_namespace()) as env:
        await env.streams.create_stream("s")
        writer = await env.writer("s")
        await writer.write(Record(b"last"))
        await writer.mark_end_of_stream()
        await writer.close()
        ledgers_before = set(await env.ledgers.ledger_ids())
        for _ in range(2):
            with pytest.raises(EndOfStreamError):
                await env.writer("s")
        assert set(await env.ledgers.ledger_ids()) == ledgers_before
        segments = await env.streams.segments("s")
        assert [s.segment.is_in_progress for s in segments] == [False]


async def test_a_takeover_that_fails_at_its_commit_leaves_the_ledger_for_the_next_owner(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new owner closes the last segment's recovered ledger in the same multi-op that
    completes the segment and starts the next. When that multi-op fails, nothing of it is
    written: the ledger stays IN_RECOVERY and the segment in progress, and the next owner
    recovers and closes both, every record kept."""
    async with stream_env(cluster, "us-east", fresh_namespace()) as env:
        await env.streams.create_stream("s")
        first = await env.writer("s")
        await first.write_bulk([f"r{i}".encode() for i in range(10)])
        await first.abandon(release_lock=True)  # dies without completing its segment
        [crashed] = await env.streams.segments("s")
        real_start = StreamMetaStore.start_segment

        async def refused(*args: Any, **kwargs: Any) -> Any:
            raise MetadataUnavailableError("ZooKeeper went away at the commit (test)")

        monkeypatch.setattr(StreamMetaStore, "start_segment", refused)
        with pytest.raises(MetadataUnavailableError):
            await env.writer("s")
        left = await env.ledgers.metadata(crashed.segment.ledger_id)
        assert left.metadata.state is LedgerState.IN_RECOVERY
        assert [s.segment.is_in_progress for s in await env.streams.segments("s")] == [True]

        monkeypatch.setattr(StreamMetaStore, "start_segment", real_start)
        second = await env.writer("s")
        await second.write(Record(b"after"))
        await second.close()
        closed = await env.ledgers.metadata(crashed.segment.ledger_id)
        assert closed.metadata.state is LedgerState.CLOSED and closed.metadata.last_entry_id >= 0
        records = await env.read_complete("s", 11)
        assert [r.payload for r in records] == [f"r{i}".encode() for i in range(10)] + [b"after"]
