"""globelog's ledger client and BookKeeper's own Java code on the same real bookies."""

from __future__ import annotations

import asyncio
import base64
import re
import subprocess
from collections.abc import AsyncIterator

import pytest

from core.children import Child
from core.topology import Replication
from ledger.codecs.metadata import LedgerState
from ledger.drivers.client import LedgerClient
from ledger.errors import LedgerFencedError
from localcluster.controller import Cluster
from localcluster.tools import Tools
from tests.support.bookkeeper_java import bookie_shell, ledger_tool, ledger_tool_argv
from tests.support.ledgers import ledger_client

PASSWORD = "interop-secret"
REPLICATION = Replication(3, 3, 2, 2)
JAVA_FENCED_CODE = "-101"  # BKException.Code.LedgerFencedException


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[LedgerClient]:
    async with ledger_client(cluster, "us-east") as connected:
        yield connected


def shell_entries(output: str, ledger_id: int) -> dict[int, str]:
    """Entries printed by `BookieShell readledger -msg`: a header line, then the body."""
    lines = output.splitlines()
    found = {}
    for i, line in enumerate(lines):
        match = re.search(rf"Lid={ledger_id}, Eid=(\d+), EntrySize=\d+", line)
        if match:
            found[int(match.group(1))] = lines[i + 1]
    return found


async def test_bookkeeper_shell_reads_a_globelog_ledger(
    cluster: Cluster, tools: Tools, client: LedgerClient
) -> None:
    writer = await client.create(REPLICATION, PASSWORD.encode())
    payloads = [f"globelog-entry-{i}".encode() for i in range(20)]
    for payload in payloads:
        await writer.add(payload)
    closed = await writer.close()
    assert closed.metadata.state is LedgerState.CLOSED and closed.metadata.last_entry_id == 19

    metadata = bookie_shell(cluster, tools, "ledgermetadata", "-ledgerid", str(writer.ledger_id))
    assert "state=CLOSED" in metadata and "lastEntryId=19" in metadata
    assert f"length={sum(len(p) for p in payloads)}" in metadata
    output = bookie_shell(
        cluster,
        tools,
        "readledger",
        "-ledgerid",
        str(writer.ledger_id),
        "-firstentryid",
        "0",
        "-lastentryid",
        "19",
        "-msg",
    )
    assert shell_entries(output, writer.ledger_id) == {
        i: p.decode() for i, p in enumerate(payloads)
    }

    java = ledger_tool(cluster, tools, "read", PASSWORD, str(writer.ledger_id))
    bodies = [base64.b64decode(line.split()[2]) for line in java if line.startswith("ENTRY")]
    assert bodies == payloads


async def test_globelog_reads_a_ledger_written_by_the_java_client(
    cluster: Cluster, tools: Tools, client: LedgerClient
) -> None:
    lines = ledger_tool(cluster, tools, "write", PASSWORD, "3", "3", "2", "25")
    ledger_id = int(next(x for x in lines if x.startswith("LEDGER")).split()[1])
    reader = await client.open(ledger_id, PASSWORD.encode())
    assert reader.is_closed and reader.lac == 24
    entries = await reader.read_entries(0, 24)
    assert entries == [f"java-entry-{i}".encode() for i in range(25)]


async def test_java_recovery_fences_a_globelog_writer(
    cluster: Cluster, tools: Tools, client: LedgerClient
) -> None:
    writer = await client.create(REPLICATION, PASSWORD.encode())
    acked = [await writer.add(f"before-fence-{i}".encode()) for i in range(10)]
    lines = await asyncio.to_thread(
        ledger_tool, cluster, tools, "recover", PASSWORD, str(writer.ledger_id)
    )
    assert "LAST 9" in lines  # every acknowledged entry survived recovery
    recovered = [base64.b64decode(x.split()[2]) for x in lines if x.startswith("ENTRY")]
    assert recovered == [f"before-fence-{i}".encode() for i in acked]
    with pytest.raises(LedgerFencedError, match=f"ledger {writer.ledger_id}"):
        await writer.add(b"after-fence")
    with pytest.raises(LedgerFencedError):
        await writer.add(b"and later")  # every later add fails the same way


async def test_globelog_recovery_fences_a_java_writer(
    cluster: Cluster, tools: Tools, client: LedgerClient
) -> None:
    argv = ledger_tool_argv(cluster, tools, "hold", PASSWORD, "3", "3", "2", "15")
    java = Child(argv, output=True, stdin=True, stderr=subprocess.DEVNULL)
    try:
        ledger_id = None
        while ledger_id is None:
            line = (await java.readline(120)).decode()
            assert line, "the Java writer exited early"
            if line.startswith("READY"):
                ledger_id = int(line.split()[1])
        reader = await client.open(ledger_id, PASSWORD.encode(), recover_ledger=True)
        assert reader.is_closed and reader.lac == 14
        assert await reader.read_entries(0, 14) == [f"java-entry-{i}".encode() for i in range(15)]
        await java.write(b"go\n")
        rest = ""
        async with asyncio.timeout(120):
            while line := (await java.readline(120)).decode():
                rest += line
        assert f"ADD_FAILED {JAVA_FENCED_CODE}" in rest, rest
    finally:
        await java.end()
