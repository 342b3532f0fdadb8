"""The task-leak check, on for the whole suite (registered in tests/conftest.py): a test fails
when it leaves an asyncio task pending at the end of an event loop, or lets a task's exception
go unretrieved ("Task exception was never retrieved"), so no failure dies in a log line.

Every event loop made through the policy (pytest-asyncio's per-test loop, `asyncio.run` in a
sync test, `asyncio.new_event_loop()` in a thread) is a `WatchedEventLoop`. It notes where each
task is created, reports tasks still pending when it is closed (and cancels them, bounded, so
they do not spill into the next test), and records the loop exception handler's calls about
lost tasks. `asyncio.run` (and `asyncio.Runner`, which the CLI's uvloop runs use) cancels the
tasks its main coroutine left behind itself before it closes the loop, where the loop would not
see them: that cancel (`asyncio.runners._cancel_all_tasks`) is wrapped to report them first,
whatever loop they ran on. The `asyncio` logger is watched too, for loops made some other way.
At the end of each test the garbage is collected (an unretrieved exception is only reported when
its task is freed) and whatever was recorded fails the test, naming each task: its coroutine,
where that is defined and where the task was created. What is lost after the last test (a
session fixture's teardown) fails the session at its end.
"""

from __future__ import annotations

import asyncio
import asyncio.runners
import gc
import logging
import sys
import threading
import weakref
from collections.abc import Callable, Coroutine, Generator, Iterator
from contextvars import Context
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

# What the loop exception handler (and so the `asyncio` logger) says about a lost task.
LOST_TASK_MESSAGES = (
    "Task exception was never retrieved",
    "Future exception was never retrieved",
    "Task was destroyed but it is pending!",
    "unhandled exception during asyncio.run() shutdown",
)
PENDING_AT_CLOSE = "Task still pending when its event loop was closed"
PENDING_AT_RUN_END = "Task still pending when asyncio.run's main coroutine returned"
# Leftover tasks are cancelled at close; one that ignores the cancel is not waited for longer.
CANCEL_LEFTOVERS_TIMEOUT_S = 5.0
CREATION_FRAMES_MAX = 3
REPO = Path(__file__).resolve().parents[2]
_ASYNCIO_DIR = str(Path(asyncio.__file__).parent)
_THIS_FILE = str(Path(__file__))
_VENV = REPO / ".venv"


@dataclass(frozen=True)
class Leak:
    """One lost task: what happened to it, which task, and its exception if it had one."""

    what: str
    task: str
    exception: str = ""

    def __str__(self) -> str:
        text = f"{self.what}: {self.task}"
        return f"{text}\n    exception: {self.exception}" if self.exception else text


class LeakRecorder:
    """What the watched loops saw; loops in other threads write to it too, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leaks: list[Leak] = []
        self._sites: weakref.WeakKeyDictionary[asyncio.Future[Any], str] = (
            weakref.WeakKeyDictionary()
        )
        self._in_handler = threading.local()
        self.tasks_made = 0

    def created(self, task: asyncio.Future[Any], site: str) -> None:
        with self._lock:
            self._sites[task] = site
            self.tasks_made += 1

    def add(self, leak: Leak) -> None:
        with self._lock:
            self._leaks.append(leak)

    def take(self) -> list[Leak]:
        with self._lock:
            leaks, self._leaks = self._leaks, []
        return leaks

    def describe(self, task: asyncio.Future[Any]) -> str:
        with self._lock:
            site = self._sites.get(task)
        return describe_task(task, site)

    def handler_called(self, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if not message.startswith(LOST_TASK_MESSAGES):
            return
        future = context.get("task") or context.get("future")
        task = self.describe(future) if isinstance(future, asyncio.Future) else repr(future)
        exception = context.get("exception")
        self.add(Leak(message, task, repr(exception) if exception is not None else ""))

    def in_handler(self) -> bool:
        return bool(getattr(self._in_handler, "active", False))

    def set_in_handler(self, active: bool) -> None:
        self._in_handler.active = active


def describe_task(task: asyncio.Future[Any], site: str | None) -> str:
    """`'name' running coro() defined at path:line, created at path:line in f <- ...`."""
    if not isinstance(task, asyncio.Task):
        return repr(task)
    coro = task.get_coro()
    code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
    name = getattr(coro, "__qualname__", None) or repr(coro)
    text = f"task {task.get_name()!r} running {name}()"
    if code is not None:
        text += f" defined at {_short(code.co_filename)}:{code.co_firstlineno}"
    frame = getattr(coro, "cr_frame", None)
    if frame is not None:
        text += f", waiting at line {frame.f_lineno}"
    return text + (f", created at {site}" if site else ", created outside a watched loop")


def creation_site(frame: FrameType | None) -> str:
    """The innermost frames of globelog's code (or else outside asyncio): who made the task."""
    ours: list[str] = []
    outside: list[str] = []
    while frame is not None and len(ours) < CREATION_FRAMES_MAX:
        filename = frame.f_code.co_filename
        where = f"{_short(filename)}:{frame.f_lineno} in {frame.f_code.co_name}"
        if _is_ours(filename):
            ours.append(where)
        elif not filename.startswith(_ASYNCIO_DIR) and filename != _THIS_FILE:
            outside.append(where)
        frame = frame.f_back
    return " <- ".join(ours or outside[:1]) or "an unknown place"


def _is_ours(filename: str) -> bool:
    path = Path(filename)
    return path.is_relative_to(REPO) and not path.is_relative_to(_VENV) and filename != _THIS_FILE


def _short(filename: str) -> str:
    path = Path(filename)
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else filename


class WatchedEventLoop(asyncio.SelectorEventLoop):
    """The default loop, noting where tasks are made and reporting the ones it loses."""

    def __init__(self, recorder: LeakRecorder) -> None:
        super().__init__()
        self._recorder = recorder

    def create_task(
        self,
        coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
        *,
        name: object = None,
        context: Context | None = None,
    ) -> asyncio.Task[Any]:
        task = super().create_task(coro, name=name, context=context)
        self._recorder.created(task, creation_site(sys._getframe(1)))
        return task

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        self._recorder.handler_called(context)
        self._recorder.set_in_handler(True)
        try:
            super().call_exception_handler(context)
        finally:
            self._recorder.set_in_handler(False)

    def close(self) -> None:
        if not self.is_running() and not self.is_closed():
            self.cancel_leftovers(PENDING_AT_CLOSE)
        super().close()

    def cancel_leftovers(self, what: str) -> None:
        """Reports each task still pending as `what`, cancels them and waits for their ends,
        at most CANCEL_LEFTOVERS_TIMEOUT_S."""
        pending = [task for task in asyncio.all_tasks(self) if not task.done()]
        for task in pending:
            self._recorder.add(Leak(what, self._recorder.describe(task)))
            task.cancel()
        if pending:
            ended = asyncio.wait(pending, timeout=CANCEL_LEFTOVERS_TIMEOUT_S)
            self.run_until_complete(ended)
            for task in pending:  # their ends were reported above; no second report at GC
                if task.done() and not task.cancelled():
                    task.exception()


def watch_runners(recorder: LeakRecorder) -> Callable[[], None]:
    """Wraps asyncio.Runner's cancel of the tasks left when its main coroutine returned, so
    each is reported (a watched loop also cancels them bounded); returns the undo."""
    cancel_all = asyncio.runners._cancel_all_tasks
    assert callable(cancel_all), "asyncio.runners changed: the task-leak check needs a new hook"

    def reported_cancel_all(loop: asyncio.AbstractEventLoop) -> None:
        if isinstance(loop, WatchedEventLoop):
            loop.cancel_leftovers(PENDING_AT_RUN_END)
        else:
            for task in asyncio.all_tasks(loop):
                recorder.add(Leak(PENDING_AT_RUN_END, recorder.describe(task)))
        cancel_all(loop)

    asyncio.runners._cancel_all_tasks = reported_cancel_all  # type: ignore[attr-defined]

    def undo() -> None:
        asyncio.runners._cancel_all_tasks = cancel_all  # type: ignore[attr-defined]

    return undo


class WatchingPolicy(asyncio.DefaultEventLoopPolicy):
    def __init__(self, recorder: LeakRecorder) -> None:
        super().__init__()
        self.recorder = recorder

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return WatchedEventLoop(self.recorder)


class LostTaskLogHandler(logging.Handler):
    """Lost tasks that the `asyncio` logger reports for a loop this module did not make."""

    def __init__(self, recorder: LeakRecorder) -> None:
        super().__init__(logging.ERROR)
        self._recorder = recorder

    def emit(self, record: logging.LogRecord) -> None:
        if self._recorder.in_handler():
            return  # a watched loop's handler: recorded already, with the task itself
        message = record.getMessage()
        first, _, rest = message.partition("\n")
        if first.startswith(LOST_TASK_MESSAGES):
            self._recorder.add(Leak(f"{first} (asyncio logger)", rest.strip()))


def leak_report(leaks: list[Leak], earlier: list[Leak], by: str = "this test") -> str:
    lines = []
    if leaks:
        lines.append(f"{len(leaks)} asyncio task(s) lost by {by}:")
        lines += [f"  - {leak}" for leak in leaks]
    if earlier:
        lines.append(f"{len(earlier)} lost before it started (a fixture's teardown or setup):")
        lines += [f"  - {leak}" for leak in earlier]
    lines.append("Await, cancel and await, or hand each task to an owner (asyncio.TaskGroup).")
    return "\n".join(lines)


_RECORDER = pytest.StashKey[LeakRecorder]()
_UNDO = pytest.StashKey[list[Any]]()


def pytest_configure(config: pytest.Config) -> None:
    recorder = LeakRecorder()
    previous_policy = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(WatchingPolicy(recorder))
    handler = LostTaskLogHandler(recorder)
    logging.getLogger("asyncio").addHandler(handler)
    config.stash[_RECORDER] = recorder
    config.stash[_UNDO] = [previous_policy, handler, watch_runners(recorder)]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """What was lost after the last test's check (a session or module fixture's teardown, a
    loop closed at the end) fails the session: no test is left to report it."""
    recorder = session.config.stash.get(_RECORDER, None)
    if recorder is None:
        return
    gc.collect()
    leaks = recorder.take()
    if not leaks:
        return
    report = leak_report(leaks, [], by="the session after its last test")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "asyncio tasks lost after the last test", red=True)
        reporter.write_line(report)
    else:
        print(report, file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    previous_policy, handler, unwatch_runners = config.stash[_UNDO]
    unwatch_runners()
    logging.getLogger("asyncio").removeHandler(handler)
    asyncio.set_event_loop_policy(previous_policy)


@pytest.fixture(autouse=True)
def no_lost_tasks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Set up before any event loop of the test and torn down after it is closed."""
    recorder = request.config.stash[_RECORDER]
    earlier = recorder.take()  # lost outside any test: the next test reports them, apart
    tasks_before = recorder.tasks_made
    yield
    if recorder.tasks_made != tasks_before:
        gc.collect()  # an unretrieved exception is reported when its task is freed
    leaks = recorder.take()
    if leaks or earlier:
        pytest.fail(leak_report(leaks, earlier), pytrace=False)
