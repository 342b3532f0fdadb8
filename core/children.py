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
import contextlib
import subprocess
import threading
from collections.abc import Sequence
from typing import IO

EOF = b""


class ChildTimeoutError(TimeoutError):
    """A child did not exit, or printed no line, within the time given."""


class Child:
    """One child process. `output=True` reads its stdout and stderr together, line by line
    (`readline`); otherwise they go where `stdout`/`stderr` say (a file, DEVNULL, inherited).
    `stdin=True` gives it a pipe to write to (`write`)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        output: bool = False,
        stdin: bool = False,
        stdout: IO[bytes] | int | None = None,
        stderr: IO[bytes] | int | None = None,
    ) -> None:
        self.argv = tuple(argv)
        self._process = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if output else stdout,
            stderr=subprocess.STDOUT if output else stderr,
        )
        loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[int] = loop.create_future()
        threading.Thread(
            target=_reap, args=(self._process, loop, self._exited), name=f"reap-{self.pid}",
            daemon=True,
        ).start()  # fmt: skip
        self._lines: asyncio.Queue[bytes] | None = None
        if output:
            self._lines = asyncio.Queue()
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

    async def write(self, data: bytes) -> None:
        """Writes `data` to its stdin and flushes it (off the loop: a full pipe blocks)."""
        pipe = self._process.stdin
        assert pipe is not None, "a child started without stdin=True"

        def send() -> None:
            pipe.write(data)
            pipe.flush()

        await asyncio.to_thread(send)

    def kill(self) -> None:
        """SIGKILL, unless it has exited already."""
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()

    def terminate(self) -> None:
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.terminate()

    async def end(self, timeout_s: float = 10.0) -> int:
        """Kills it unless it has exited, and waits for its exit (reaped: no zombie left)."""
        self.kill()
        code = await self.wait(timeout_s)
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        return code


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
    """The reading thread: every line into `lines` on the loop, then EOF; it ends with the
    child's output (the child exited or closed it), or when the loop has closed."""
    try:
        for line in iter(pipe.readline, EOF):
            loop.call_soon_threadsafe(lines.put_nowait, line)
        loop.call_soon_threadsafe(lines.put_nowait, EOF)
    except RuntimeError:  # the loop closed: nobody is reading any more
        pass
    finally:
        pipe.close()


async def run(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[bytes]:
    """Runs a short command to its end, its stdout and stderr captured. The child is killed
    when `timeout_s` passes (subprocess.TimeoutExpired) and, if the caller is cancelled, within
    `timeout_s` of that: the wait is a thread's, which a cancel cannot stop."""
    return await asyncio.to_thread(
        subprocess.run, argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s
    )
