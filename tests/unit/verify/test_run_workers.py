"""The failover run's workers: which errors are operating answers (history) and which fail
the run; a failed worker fails the run with its cause instead of vanishing; a tailing reader
records errors answered as failed polls and goes on; the wait for the readers is bounded."""

from __future__ import annotations

import asyncio
import io
from types import SimpleNamespace
from typing import Any

import pytest

from core.dlsn import DLSN
from core.errors import (
    MetadataUnavailableError,
    OutcomeUnknownError,
    OwnerFencedError,
    ProxyError,
    ProxyUnreachableError,
    StreamNotFoundError,
)
from verify.history import read_history
from verify.run import run, workload
from verify.run.faults import FaultsInForce
from verify.run.pages import PagedRecord
from verify.run.recorder import (
    Recorder,
    WorkerFailedError,
    operating_answer,
    owned,
    supervised,
)
from verify.run.workload import Frontier

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("err", "operating"),
    [
        (MetadataUnavailableError("no ZooKeeper"), True),
        (OwnerFencedError("fenced"), True),
        (ProxyUnreachableError("refused"), True),
        (ProxyError("metadata_session_expired", "gone", False, 500), True),
        (ProxyError("internal", "a bug", False, 500), False),
        (OutcomeUnknownError("may have landed", "owner_fenced"), True),
        (OutcomeUnknownError("may have landed", "internal"), False),  # a 500 behind it
        (StreamNotFoundError("no s0"), False),
        (KeyError("records"), False),
    ],
)
def test_operating_answers_are_globelog_errors_a_fault_can_cause(
    err: BaseException, operating: bool
) -> None:
    assert operating_answer(err) is operating


async def test_a_failed_worker_fails_the_run_with_its_cause_and_stops_the_others() -> None:
    others_cancelled = asyncio.Event()

    async def waits_for_ever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            others_cancelled.set()
            raise

    async def breaks() -> None:
        await asyncio.sleep(0)
        raise KeyError("records")

    async def run() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(owned("r-eu-west-s0", waits_for_ever()))
            async with asyncio.TaskGroup() as inner:
                inner.create_task(owned("w-us-east-s1", breaks()))

    with pytest.raises(WorkerFailedError) as failed:
        await supervised(run())
    assert failed.value.causes[0][0] == "w-us-east-s1"
    assert isinstance(failed.value.__cause__, KeyError)
    assert "w-us-east-s1 failed: KeyError: 'records'" in str(failed.value)
    assert others_cancelled.is_set()


async def test_an_error_of_the_runs_own_code_beside_failed_workers_is_one_failure() -> None:
    async def breaks_when_stopped() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise KeyError("records") from None

    async def run() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(owned("w-us-east-s1", breaks_when_stopped()))
            await asyncio.sleep(0)
            raise ValueError("not a worker's")

    with pytest.raises(WorkerFailedError) as failed:
        await supervised(run())
    assert [(who, type(err)) for who, err in failed.value.causes] == [
        ("w-us-east-s1", KeyError),
        ("harness", ValueError),
    ]
    assert isinstance(failed.value.__cause__, KeyError)

    async def alone() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(asyncio.sleep(0))
            raise ValueError("not a worker's")

    with pytest.raises(WorkerFailedError, match="harness failed: ValueError: not a worker's"):
        await supervised(alone())
    with pytest.raises(ValueError, match="outside a group"):  # raised as it was
        await supervised(_raises())


async def _raises() -> None:
    await asyncio.sleep(0)
    raise ValueError("outside a group")


@pytest.mark.parametrize("first", ["cancel", "failure"])
async def test_a_cancel_arriving_as_a_worker_fails_stays_a_cancel(first: str) -> None:
    """Ctrl-C cancels asyncio.run's main task; a worker that fails as that cancel arrives (or
    just before it, while the group waits for the others) must not turn it into a failure."""
    running = asyncio.Event()
    failure = asyncio.Event()

    async def worker() -> None:
        running.set()
        try:
            await failure.wait()
        except asyncio.CancelledError:
            raise KeyError("records") from None  # failing as it is cancelled
        raise KeyError("records")

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # a heal, a connection closing
            raise

    async def run() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(owned("r-eu-west-s0", slow_to_stop()))
            group.create_task(owned("w-us-east-s1", worker()))
            await asyncio.Event().wait()

    task = asyncio.create_task(supervised(run()))
    await asyncio.wait_for(running.wait(), 5)
    if first == "failure":
        failure.set()
        await asyncio.sleep(0.01)  # the group is waiting for the reader to stop
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert task.cancelled()


class FakePages:
    """Answers a tail's page requests from a script: a list of pages or errors."""

    script: list[Any] = []

    def __init__(self, *args: Any) -> None:
        self.next_seq = 0

    async def next(self, wait_ms: int = 1000) -> list[PagedRecord]:
        await asyncio.sleep(0)
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return list(step)


async def test_a_tail_records_errors_answered_as_failed_polls_and_fails_on_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workload, "ProxyPages", FakePages)
    monkeypatch.setattr(workload, "READ_RETRY_S", 0)
    FakePages.script = [
        ProxyError("metadata_unavailable", "no ZooKeeper session", True, 503),
        [PagedRecord(0, DLSN(1, 0, 0), b"7"), PagedRecord(1, DLSN(1, 1, 0), b"8")],
        ProxyError("internal", "a bug", False, 500),
    ]
    file = io.StringIO()
    frontier = Frontier()
    deployment = SimpleNamespace(read_url=lambda region: "http://127.0.0.1:1")
    work = workload.tail(
        None,
        deployment,
        "ns",
        "eu-west",
        "s0",
        Recorder(file),
        frontier,
        asyncio.Event(),  # type: ignore[arg-type]
    )
    with pytest.raises(WorkerFailedError, match="r-eu-west-s0 failed: ProxyError"):
        await supervised(owned("r-eu-west-s0", work))
    ops = read_history(file.getvalue().splitlines())
    assert [(op.type, op.f) for op in ops] == [("fail", "poll"), ("ok", "poll")]
    assert ops[0].detail.startswith("metadata_unavailable: [metadata_unavailable] no ZooKeeper")
    assert ops[1].records == ((DLSN(1, 0, 0), 7), (DLSN(1, 1, 0), 8))
    assert frontier.read[("eu-west", "s0")] == DLSN(1, 1, 0)


async def test_the_wait_for_tailing_readers_ends_when_they_reach_the_acknowledged_end() -> None:
    frontier = Frontier()
    frontier.acknowledged("s0", DLSN(2, 3, 0))
    frontier.acknowledged("s0", DLSN(1, 9, 0))  # an earlier ack completing later
    frontier.read[("eu-west", "s0")] = None
    assert frontier.behind() == ["r-eu-west-s0 at the start of 2.3.0"]
    waiting = asyncio.create_task(frontier.caught_up(bound_s=30))
    frontier.advanced("eu-west", "s0", DLSN(2, 0, 0))
    await asyncio.sleep(0)
    assert not waiting.done()
    frontier.advanced("eu-west", "s0", DLSN(2, 3, 0))
    assert await asyncio.wait_for(waiting, 5) == []


async def test_the_wait_for_tailing_readers_is_bounded_and_names_who_is_behind() -> None:
    frontier = Frontier()
    frontier.acknowledged("s1", DLSN(3, 0, 0))
    frontier.read[("us-west", "s1")] = DLSN(2, 7, 0)
    assert await frontier.caught_up(bound_s=0.01) == ["r-us-west-s1 at 2.7.0 of 3.0.0"]


async def test_the_workload_says_how_far_it_is_until_it_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run, "PROGRESS_EVERY_S", 0.02)
    said: list[str] = []
    stop = asyncio.Event()
    in_force = FaultsInForce(Recorder(io.StringIO()), [])
    reporting = asyncio.create_task(
        run._progress_every(run.RunConfig(seconds=180), [42], in_force, stop, said.append)
    )
    await asyncio.sleep(0.1)
    stop.set()
    await asyncio.wait_for(reporting, 1.0)
    assert len(said) >= 2
    assert said[0].endswith("s of 180 s: 42 sends; fault in force: none"), said
