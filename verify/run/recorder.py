"""What a failover run writes down and what stops it: the history file's recorder, which
errors are operating answers (recorded in the history) and which fail the run."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO, TypeVar

from core import errors, runtime
from core.errors import GlobelogError
from verify.history import encode_op

T = TypeVar("T")

# Answers that say the request or the server is broken, never that a fault is in the way:
# a 500, a request the proxy calls malformed, a stream the run created being unknown, a page
# that is not the documented one. A worker that meets one fails the run; every other globelog
# error (retriable or definite: no owner, fenced, no ZooKeeper, unreachable, over capacity,
# ...) is what a client meets while faults come and go, and goes into the history.
NOT_OPERATING_CODES = frozenset(
    {
        GlobelogError.code,  # "internal"
        errors.ConfigError.code,
        errors.BadRequestError.code,
        errors.InvalidDlsnError.code,
        errors.InvalidStreamNameError.code,
        errors.InvalidRecordError.code,
        errors.RecordTooLargeError.code,
        errors.TxidOutOfOrderError.code,
        errors.StreamNotFoundError.code,
        errors.StreamExistsError.code,
        "not_found",  # aiohttp's own refusals, in globelog's form (region/http_errors.py)
        "method_not_allowed",
        "request_too_large",
        "read_answer_invalid",  # localcluster/tails.py: an answer that is not the documented one
    }
)


def operating_answer(err: BaseException) -> bool:
    """True for an error a client meets while faults come and go (history, not failure); a
    write whose outcome is unknown is judged by what made it so (a 500 is no fault's)."""
    if not isinstance(err, GlobelogError):
        return False
    cause = err.cause if isinstance(err, errors.OutcomeUnknownError) else None
    return err.code not in NOT_OPERATING_CODES and cause not in NOT_OPERATING_CODES


def describe(err: GlobelogError) -> str:
    return f"{err.code}: {err}"[:200]


def answered(err: GlobelogError) -> dict[str, str]:
    """The fields a history op keeps of an error answered: its code, and for an outcome
    unknown what made it so (`cause`)."""
    fields = {"code": err.code, "detail": describe(err)}
    if isinstance(err, errors.OutcomeUnknownError):
        fields["cause"] = err.cause
    return fields


class WorkerFailedError(GlobelogError):
    """A worker of the run (producer, tailing reader, nemesis, final reader) failed for a
    reason that is not an operating answer: the run proves nothing and fails. `causes` holds
    each failed worker's exception, the first also as `__cause__`."""

    code = "failover_run_failed"

    def __init__(self, failures: list[tuple[str, BaseException]]) -> None:
        assert failures, "a harness failure names at least one worker"
        self.causes = failures
        shown = "; ".join(f"{who} failed: {type(err).__name__}: {err}" for who, err in failures)
        super().__init__(f"the failover run stopped: {shown}")


async def owned(worker: str, work: Awaitable[T]) -> T:
    """Runs one worker of the run (under a TaskGroup, or awaited by the run itself); any
    exception it ends with becomes a WorkerFailedError naming it, so its group cancels the
    others and the run fails."""
    try:
        return await work
    except Exception as err:
        raise WorkerFailedError([(worker, err)]) from err


async def supervised(work: Coroutine[Any, Any, None]) -> None:
    """Awaits work that runs owned workers under TaskGroups, and says precisely how it ended.
    A cancel of the caller (Ctrl-C) wins and is re-raised, even when workers failed as it
    came (a TaskGroup raises their errors instead); so does an interrupt a group holds.
    Otherwise a group's failures come out as one WorkerFailedError (the first cause
    chained), an exception of the run's own code among them named `harness`: never a raw
    exception group. Anything raised outside a group is raised as it was."""
    caller = asyncio.current_task()
    assert caller is not None, "supervised runs in a task"
    cancels_before = caller.cancelling()
    # The work runs as a task of its own, awaited here (a cancel of the caller cancels it), so
    # the caller's count of cancel requests holds only those from outside: on Python 3.11 a
    # TaskGroup that cancels its parent after a task failed, while the parent already waited
    # in the group's exit, never takes its request back (3.12 does).
    running = asyncio.get_running_loop().create_task(work, name="supervised run")
    try:
        await running
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:
        if caller.cancelling() > cancels_before:
            raise asyncio.CancelledError(f"cancelled as the run failed: {err!r}") from err
        if not isinstance(err, BaseExceptionGroup):
            raise
        leaves = _leaves(err)
        interrupt = next((e for e in leaves if isinstance(e, KeyboardInterrupt | SystemExit)), None)
        if interrupt is not None:
            raise interrupt from err
        failure = one_failure(leaves)
        raise failure from failure.__cause__
    if caller.cancelling() > cancels_before:  # the work ended without heeding the cancel
        raise asyncio.CancelledError("cancelled as the run ended")


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        item = pending.pop(0)
        if isinstance(item, BaseExceptionGroup):
            pending[:0] = item.exceptions
        else:
            leaves.append(item)
    return leaves


def one_failure(leaves: list[BaseException]) -> WorkerFailedError:
    """The exceptions of a TaskGroup's exception group as one WorkerFailedError: each failed
    worker's causes, and anything else (the run's own code failing beside its workers) as the
    `harness`'s."""
    failures: list[tuple[str, BaseException]] = []
    for leaf in leaves:
        failures += leaf.causes if isinstance(leaf, WorkerFailedError) else [("harness", leaf)]
    combined = WorkerFailedError(failures)
    combined.__cause__ = failures[0][1]
    return combined


def wall_now() -> str:
    """The wall clock (UTC, ms) for a fault's records: what lines them up with the logs of the
    processes it hit, which stamp wall time (the history's own `time` is from the run's start)."""
    return datetime.fromtimestamp(runtime.wall_s(), UTC).isoformat(timespec="milliseconds")


@dataclass
class Recorder:
    """Writes each operation to the history as it is invoked and as it completes."""

    file: TextIO
    began: float = field(default_factory=runtime.monotonic)
    lines: int = 0

    def add(self, **op: Any) -> None:
        op["time"] = round(runtime.monotonic() - self.began, 4)
        self.file.write(encode_op(op) + "\n")
        self.lines += 1
