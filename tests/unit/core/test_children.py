"""Child processes run off the event loop's pipe transports (core/children.py)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from core import children
from core.children import Child, ChildTimeoutError

ROOT = Path(__file__).resolve().parents[3]
LOOP_SUBPROCESS = re.compile(r"create_subprocess_(exec|shell)|connect_(read|write)_pipe")


async def test_a_short_command_runs_to_its_end_and_one_past_its_time_is_killed() -> None:
    done = await children.run(("sh", "-c", "echo out; echo err >&2; exit 3"), 10)
    assert (done.returncode, done.stdout, done.stderr) == (3, b"out\n", b"err\n")
    with pytest.raises(subprocess.TimeoutExpired):
        await children.run(("sleep", "30"), 0.2)


async def test_a_child_is_read_line_by_line_written_to_and_waited_for() -> None:
    cat = Child(("cat",), output=True, stdin=True)
    try:
        await cat.write(b"one\ntwo\n")
        assert await cat.readline(10) == b"one\n"
        assert await cat.readline(10) == b"two\n"
        with pytest.raises(ChildTimeoutError, match=r"cat printed no line in 0\.1 s"):
            await cat.readline(0.1)
        assert cat.returncode is None
    finally:
        assert await cat.end() == -9
    assert await cat.readline(10) == b""
    assert await cat.readline(10) == b"", "the end is told to every later read"


async def test_a_wait_is_bounded_and_a_childs_code_comes_back() -> None:
    sleeper = Child(("sleep", "30"))
    with pytest.raises(ChildTimeoutError, match=r"sleep did not exit in 0\.1 s"):
        await sleeper.wait(0.1)
    sleeper.terminate()
    assert await sleeper.wait(10) == -15
    assert await Child((sys.executable, "-c", "raise SystemExit(4)")).wait(30) == 4


async def test_children_leave_the_loops_own_sockets_alone() -> None:
    """Children come and go, with output read and stdin given, while a connection stays open:
    its descriptor still belongs to it and it still carries bytes (uvloop's pipe transports
    closed a reused descriptor under a live connection)."""
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sock = writer.get_extra_info("socket")
    fd = sock.fileno()
    try:
        for i in range(30):
            child = Child(("sh", "-c", f"echo {i}"), output=True, stdin=True)
            assert await child.readline(10) == f"{i}\n".encode()
            await child.end()
            other = socket.socket()  # takes any number a double close would free
            other.close()
            os.fstat(fd)
            writer.write(b"ping %d\n" % i)
            assert await asyncio.wait_for(reader.readline(), 10) == b"ping %d\n" % i
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        writer.write(line)
        await writer.drain()
    writer.close()


def test_no_code_hands_a_childs_pipes_to_the_event_loop() -> None:
    """Every child goes through core/children.py: the loop's subprocess and pipe transports
    (uvloop's close their descriptor twice) appear nowhere else, tests included."""
    offenders = []
    for path in ROOT.rglob("*.py"):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in {".venv", ".cache", "build"} or path == Path(__file__).resolve():
            continue
        if LOOP_SUBPROCESS.search(path.read_text(errors="replace")):
            offenders.append(str(relative))
    assert offenders == []


async def test_a_child_printing_faster_than_it_is_read_waits_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lines read ahead are bounded (I10): past LINES_MAX the child waits on its pipe."""
    monkeypatch.setattr(children, "LINES_MAX", 5)
    count, program = 2000, "for i in range(2000): print(f'{i:08d}' + 'x' * 1000, flush=True)"
    reader = Child((sys.executable, "-c", program), output=True)  # 2 MB: past any pipe's room
    await asyncio.sleep(1.0)
    assert reader.returncode is None, "it waits for its reader, its pipe full"
    got = [await reader.readline(10) for _ in range(count)]
    assert got == [f"{i:08d}".encode() + b"x" * 1000 + b"\n" for i in range(count)]
    assert await reader.readline(10) == b""
    assert await reader.wait(10) == 0


async def test_a_write_to_a_child_that_reads_nothing_ends_in_its_time() -> None:
    sleeper = Child(("sleep", "30"), stdin=True)
    try:
        with pytest.raises(ChildTimeoutError, match=r"sleep took no input in 0\.5 s"):
            await sleeper.write(b"x" * (4 * 1024 * 1024), timeout_s=0.5)
    finally:
        assert await sleeper.end() == -9
