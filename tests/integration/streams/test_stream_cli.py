"""`globelog stream|write|read|segments` as a user runs them, against the real cluster.

Bad input (an empty line, an oversized record, a bad DLSN, an unknown stream, a txid going
backwards) gets a clear error naming what was wrong, and changes nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import pytest

from core.errors import OwnershipError, TxidOutOfOrderError
from core.records import RECORD_BYTES_MAX, Record
from localcluster.controller import Cluster
from tests.support.streams import fresh_namespace, stream_env
from writer.admin import delete_stream


class Cli:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.namespace = f"cli{uuid.uuid4().hex[:8]}"

    def __call__(self, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        command, *rest = args
        verb = [command] if command != "stream" else [command, rest.pop(0)]
        argv = [
            sys.executable, "-m", "cli.main", *verb, *rest,
            "--topology", str(self.cluster.topology_path), "--namespace", self.namespace,
        ]  # fmt: skip
        return run_bounded(argv, stdin)


COMMAND_TIMEOUT_S = 60


def run_bounded(
    argv: list[str], stdin: bytes, timeout_s: float = COMMAND_TIMEOUT_S
) -> subprocess.CompletedProcess[bytes]:
    """Runs one command; one that outlives its bound is aborted and its thread stacks shown."""
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as process:
        try:
            out, err = process.communicate(stdin, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            out, err = process.communicate()
            pytest.fail(f"{argv[3:]} still running after {timeout_s} s:\n{err.decode()}")
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


@pytest.fixture
def cli(cluster: Cluster) -> Cli:
    return Cli(cluster)


def lines(result: subprocess.CompletedProcess[bytes]) -> list[dict[str, object]]:
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def test_write_prints_one_acknowledgement_per_line_and_read_prints_them_back(cli: Cli) -> None:
    assert cli("stream", "create", "s").returncode == 0
    written = cli("write", "s", "--region", "us-east", stdin=b"one\ntwo\n\xff\xfe\n")
    assert written.returncode == 0, written.stderr
    acks = lines(written)
    assert [a["seq"] for a in acks] == [0, 1, 2]
    assert [a["dlsn"] for a in acks] == ["1.0.0", "1.1.0", "1.2.0"]
    read = cli("read", "s", "--region", "eu-west", "--json")
    assert read.returncode == 0, read.stderr
    records = lines(read)
    assert [r.get("payload") for r in records] == ["one", "two", None]
    assert records[2]["payload_b64"] == "//4="
    assert [r["dlsn"] for r in records] == [a["dlsn"] for a in acks]
    batch = cli("write", "s", "--batch", stdin=b"".join(b"b%d\n" % i for i in range(500)))
    assert batch.returncode == 0 and len(lines(batch)) == 500
    from_seq = cli("read", "s", "--from-seq", "2", "--limit", "2")
    assert from_seq.stdout.splitlines() == [b"\xef\xbf\xbd\xef\xbf\xbd", b"b0"]
    listing = cli("stream", "list")
    assert listing.stdout.decode().split() == ["s"]
    described = json.loads(cli("stream", "describe", "s").stdout)
    assert described["records_in_completed_segments"] == 503 and described["owner"] is None
    segments = cli("segments", "s", "--json")
    report = json.loads(segments.stdout)
    assert [s["sequence"] for s in report] == [1, 2]
    assert all(e["audit"] != "fail" for s in report for e in s["ensembles"])
    regions = {b["region"] for s in report for e in s["ensembles"] for b in e["bookies"]}
    assert len(regions) >= 2


def test_bad_input_gets_a_clear_error_and_changes_nothing(cli: Cli) -> None:
    cli("stream", "create", "s")
    empty = cli("write", "s", stdin=b"kept\n\nnever\n")
    assert empty.returncode == 2
    assert b"stdin line 2 is empty" in empty.stderr
    assert [a["seq"] for a in lines(empty)] == [0], "the line before the bad one is written"
    huge = cli("write", "s", stdin=b"x" * (RECORD_BYTES_MAX + 10) + b"\n")
    assert huge.returncode == 2 and str(RECORD_BYTES_MAX).encode() in huge.stderr
    bad_dlsn = cli("read", "s", "--from-dlsn", "1.x.0")
    assert bad_dlsn.returncode == 1 and b"invalid_dlsn" in bad_dlsn.stderr
    assert b"'1.x.0'" in bad_dlsn.stderr
    bad_truncate = cli("stream", "truncate", "s", "--to", "nope")
    assert bad_truncate.returncode == 1 and b"invalid_dlsn" in bad_truncate.stderr
    unknown = cli("write", "missing", stdin=b"x\n")
    assert unknown.returncode == 1 and b"stream 'missing' does not exist" in unknown.stderr
    unknown_read = cli("read", "missing")
    assert unknown_read.returncode == 1 and b"stream_not_found" in unknown_read.stderr
    bad_ttl = cli("stream", "retention", "s", "--ttl", "soon")
    assert bad_ttl.returncode == 1 and b"'soon'" in bad_ttl.stderr
    duplicate = cli("stream", "create", "s")
    assert duplicate.returncode == 1 and b"stream_exists" in duplicate.stderr
    read = cli("read", "s")
    assert read.stdout == b"kept\n", "nothing but the one good record was written"


async def test_a_txid_going_backwards_is_refused_and_an_owned_stream_is_not_deleted(
    cluster: Cluster,
) -> None:
    async with stream_env(cluster, "us-east", fresh_namespace()) as env:
        await env.streams.create_stream("s")
        writer = await env.writer("s")
        await writer.write(Record(b"a", txid=100))
        with pytest.raises(TxidOutOfOrderError, match="txid 99 is below"):
            await writer.write(Record(b"b", txid=99))
        with pytest.raises(TxidOutOfOrderError, match="record 1 of the batch"):
            await writer.write_bulk([Record(b"c", txid=200), Record(b"d", txid=150)])
        await writer.write(Record(b"e", txid=100))
        with pytest.raises(OwnershipError, match="is owned by"):
            await delete_stream(env.streams, env.ledgers, "s")
        await writer.close()
        reader = await env.reader("s", follow=False)
        async with reader:
            assert [(r.payload, r.txid) async for r in reader] == [(b"a", 100), (b"e", 100)]


def test_delete_removes_the_stream_and_its_ledgers(cli: Cli) -> None:
    cli("stream", "create", "gone")
    assert cli("write", "gone", stdin=b"x\n").returncode == 0
    deleted = cli("stream", "delete", "gone")
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout)["ledgers_deleted"] == 1
    assert cli("stream", "list").stdout == b""
    assert cli("read", "gone").returncode == 1
