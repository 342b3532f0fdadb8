"""Child processes started from an event loop, without the loop's own subprocess support.

globelog's processes run on uvloop, whose pipe transports close their descriptor twice: libuv
closes it, then so does the file object the transport was handed. When the number was given to
a new socket in between, the second close takes that socket from under its transport, and the
next connection that is given the number fails with "File descriptor N is used by transport"
(a failover run's client died of it while the nemesis ran `ss -K`). So children are started with
`subprocess.Popen`, which owns its pipes alone; their exit is awaited and their output read by
threads of their own, and nothing of theirs is registered with the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import subprocess
import threading
from collections.abc import Sequence
from typing import IO

EOF = b""
LINES_MAX = 10_000  # lines read ahead of the caller (I10); the child waits past it
WRITE_TIMEOUT_S = 30.0  # a write to a child's stdin ends within this
END_TIMEOUT_S = 10.0  # a killed child is reaped within this, or logged
HAND_OVER_CHECK_S = 1.0  # how often a reading thread waiting for room looks at the loop

log = logging.getLogger(__name__)


class ChildTimeoutError(TimeoutError):
    """A child did not exit, or printed no line, within the time given."""


class Child:
    """One child process. `output=True` reads its stdout line by line (`readline`), its
    stderr with it unless `stderr` says where else; otherwise they go where `stdout`/`stderr`
    say (a file, DEVNULL, inherited). `stdin=True` gives it a pipe to write to (`write`).
    Started on a running event loop, which its threads report to."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        output: bool = False,
        stdin: bool = False,
        stdout: IO[bytes] | int | None = None,
        stderr: IO[bytes] | int | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()  # first: a child with no loop would go unreaped
        self.argv = tuple(argv)
        self._process = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if output else stdout,
            stderr=subprocess.STDOUT if output and stderr is None else stderr,
        )
        self._exited: asyncio.Future[int] = loop.create_future()
        threading.Thread(
            target=_reap, args=(self._process, loop, self._exited), name=f"reap-{self.pid}",
            daemon=True,
        ).start()  # fmt: skip
        self._lines: asyncio.Queue[bytes] | None = None
        if output:
            self._lines = asyncio.Queue(LINES_MAX)
            pipe = self._process.stdout
            assert pipe is not None
            threading.Thread(
                target=_pump, args=(pipe, loop, self._lines), name=f"read-{self.pid}", daemon=True
            ).start()

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """Its exit code; None while it runs (and until its reaping thread has seen it end)."""
        return self._process.returncode

    async def wait(self, timeout_s: float | None = None) -> int:
        """Its exit code, once it has exited; ChildTimeoutError after `timeout_s` (None: no
        bound, for a child the caller kills when it stops waiting)."""
        try:
            return await asyncio.wait_for(asyncio.shield(self._exited), timeout_s)
        except TimeoutError:
            raise ChildTimeoutError(f"{self.argv[0]} did not exit in {timeout_s} s") from None

    async def readline(self, timeout_s: float) -> bytes:
        """Its next line of output, newline included; b"" once its output has ended.
        ChildTimeoutError when no line came within `timeout_s`."""
        assert self._lines is not None, "a child started without output=True"
        try:
            async with asyncio.timeout(timeout_s):
                line = await self._lines.get()
        except TimeoutError:
            raise ChildTimeoutError(f"{self.argv[0]} printed no line in {timeout_s} s") from None
        if line == EOF:
            self._lines.put_nowait(EOF)  # the end, for every later read too
        return line

    async def write(self, data: bytes, timeout_s: float = WRITE_TIMEOUT_S) -> None:
        """Writes `data` to its stdin and flushes it, off the loop (a full pipe blocks);
        ChildTimeoutError when the child has not taken it within `timeout_s`."""
        pipe = self._process.stdin
        assert pipe is not None, "a child started without stdin=True"

        def send() -> None:
            pipe.write(data)
            pipe.flush()

        try:
            await asyncio.wait_for(asyncio.to_thread(send), timeout_s)
        except TimeoutError:
            raise ChildTimeoutError(f"{self.argv[0]} took no input in {timeout_s} s") from None

    def kill(self) -> None:
        """SIGKILL, unless it has exited already."""
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()

    def terminate(self) -> None:
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.terminate()

    async def end(self, timeout_s: float = END_TIMEOUT_S) -> int | None:
        """Kills it unless it has exited, and waits for its exit (reaped: no zombie left);
        its exit code. For cleanup paths: it raises nothing of its own, and a child not reaped
        within `timeout_s` of its SIGKILL is logged and None returned."""
        try:
            self.kill()
            return await self.wait(timeout_s)
        except ChildTimeoutError:
            log.warning("%s (pid %d) not reaped %s s after SIGKILL", self.argv[0], self.pid,
                        timeout_s)  # fmt: skip
            return None
        finally:
            if self._process.stdin is not None:
                with contextlib.suppress(OSError):
                    self._process.stdin.close()


def _reap(
    process: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop, exited: asyncio.Future[int]
) -> None:
    """The reaping thread: waits for the child's exit, then tells the loop its code."""
    code = process.wait()
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting any more
        loop.call_soon_threadsafe(_settle, exited, code)


def _settle(exited: asyncio.Future[int], code: int) -> None:
    if not exited.done():
        exited.set_result(code)


def _pump(pipe: IO[bytes], loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[bytes]) -> None:
    """The reading thread: every line into `lines` on the loop (waiting while it is full, so
    a child that prints faster than it is read waits on its pipe, as it would on a terminal),
    then EOF; it ends with the child's output (the child exited or closed it, or reading it
    failed), or when the loop has closed."""
    try:
        for line in iter(pipe.readline, EOF):
            if not _hand_over(loop, lines, line):
                return  # (the loop closed: nobody is reading any more)
    except (OSError, ValueError) as failed:
        log.warning("reading a child's output failed: %r", failed)
    finally:
        pipe.close()
        _hand_over(loop, lines, EOF)


def _hand_over(loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[bytes], line: bytes) -> bool:
    """Puts `line` into `lines` from the reading thread, once there is room; False when the
    loop closed first."""
    try:
        put = asyncio.run_coroutine_threadsafe(lines.put(line), loop)
    except RuntimeError:
        return False
    while True:
        try:
            put.result(timeout=HAND_OVER_CHECK_S)
            return True
        except concurrent.futures.TimeoutError:
            if loop.is_closed():
                return False
        except concurrent.futures.CancelledError:
            return False


async def run(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[bytes]:
    """Runs a short command to its end, its stdout and stderr captured. The child is killed
    when `timeout_s` passes (subprocess.TimeoutExpired) and, if the caller is cancelled, within
    `timeout_s` of that: the wait is a thread's, which a cancel cannot stop."""
    return await asyncio.to_thread(
        subprocess.run, argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s
    )
