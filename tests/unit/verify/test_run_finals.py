"""The failover run's final reads through the library: a data loss the reader reports is
written to the history with its range and checked (a `lost` anomaly), never a crash of the run;
every read is bounded, and one that runs out of time (or that an error answered stops) is in the
history as a read that did not end, which the checker calls `read-unavailable`."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from core.dlsn import DLSN
from core.errors import DataLossError, MetadataUnavailableError, StreamNotFoundError
from verify.checker import check
from verify.history import read_history
from verify.run import finals
from verify.run.recorder import Recorder

pytestmark = pytest.mark.unit

REGIONS = ["us-east", "us-west", "eu-west"]
WHOLE = [("1.0.0", 0), ("1.1.0", 1), ("2.0.0", 2)]
RUN_BOUND_S = 10.0  # the test's own bound: a read the harness does not bound fails it


class FakeReader:
    """A LogReader of a script: a record as (dlsn text, value), an exception to raise, or
    "hang" for a read that never ends; None after the script's last step."""

    scripts: dict[tuple[str, str], list[Any]] = {}

    def __init__(self, steps: list[Any]) -> None:
        self.steps = list(steps)
        self.closed = False

    @classmethod
    async def open(cls, streams: Any, ledgers: Any, stream: str, *_: Any) -> FakeReader:
        await asyncio.sleep(0)
        return cls(cls.scripts[(streams.region, stream)])

    async def read_next(self, timeout_s: float | None = None) -> Any:
        await asyncio.sleep(0)
        if not self.steps:
            return None
        step = self.steps.pop(0)
        if step == "hang":
            await asyncio.Event().wait()
        if isinstance(step, BaseException):
            raise step
        dlsn, value = step
        return SimpleNamespace(dlsn=DLSN.parse(dlsn), payload=str(value).encode())

    def __aiter__(self) -> FakeReader:
        return self

    async def __anext__(self) -> Any:
        record = await self.read_next()
        if record is None:
            raise StopAsyncIteration
        return record

    async def __aenter__(self) -> FakeReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.closed = True


class FakeStreams:
    def __init__(self, region: str) -> None:
        self.region = region

    async def segments(self, stream: str) -> list[Any]:
        await asyncio.sleep(0)
        return [SimpleNamespace(segment=SimpleNamespace(ledger_id=n)) for n in (1, 2)]


@asynccontextmanager
async def fake_session(deployment: Any, region: str, namespace: str) -> AsyncIterator[Any]:
    yield SimpleNamespace(streams=FakeStreams(region), ledgers=None)


@pytest.fixture
def library(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, str], list[Any]]:
    monkeypatch.setattr(finals, "LogReader", FakeReader)
    monkeypatch.setattr(finals, "read_session", fake_session)
    FakeReader.scripts = {(region, "s"): list(WHOLE) for region in REGIONS}
    return FakeReader.scripts


def sends(file: io.StringIO) -> Recorder:
    rec = Recorder(file)
    for value, dlsn in ((0, "1.0.0"), (1, "1.1.0"), (2, "2.0.0")):
        rec.add(process="w0", type="invoke", f="send", stream="s", value=value)
        rec.add(process="w0", type="ok", f="send", stream="s", value=value, dlsn=dlsn)
    return rec


async def final_reads(rec: Recorder) -> list[int]:
    deployment = SimpleNamespace(
        topology=SimpleNamespace(region_names=REGIONS), in_region=lambda region, work: work
    )
    work = finals.library_final_reads(deployment, "ns", ["s"], rec)  # type: ignore[arg-type]
    return await asyncio.wait_for(work, RUN_BOUND_S)


async def test_a_data_loss_is_recorded_with_its_range_and_the_checker_calls_it_lost(
    library: dict[tuple[str, str], list[Any]],
) -> None:
    loss = DataLossError("stream 's': data lost from 1.1.0 to 1.1.0", "1.1.0", "1.1.0")
    library[("us-west", "s")] = [("1.0.0", 0), loss, ("2.0.0", 2)]  # reading goes on after it
    file = io.StringIO()
    ledger_ids = await final_reads(sends(file))
    assert ledger_ids == [1, 2]
    history = read_history(file.getvalue().splitlines())
    read = {op.region: op for op in history if op.f == "final"}
    assert sorted(read) == sorted(REGIONS), "every region read after the loss"
    assert read["us-west"].type == "ok"
    assert read["us-west"].lost == ((DLSN(1, 1, 0), DLSN(1, 1, 0)),)
    assert [v for _, v in read["us-west"].records] == [0, 2]
    assert "data lost from 1.1.0 to 1.1.0" in read["us-west"].detail
    report = check(history)
    assert {k: n for k, n in report.counts().items() if n} == {"lost": 1, "region-divergence": 1}
    [lost] = [a for a in report.anomalies if a.kind == "lost"]
    assert "value 1" in lost.detail and "us-west" in lost.detail and not report.valid


async def test_a_read_that_does_not_end_in_its_bound_is_recorded_as_unended(
    library: dict[tuple[str, str], list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(finals, "LIBRARY_READ_BOUND_S", 0.05)
    library[("eu-west", "s")] = [("1.0.0", 0), "hang"]
    file = io.StringIO()
    await final_reads(sends(file))
    history = read_history(file.getvalue().splitlines())
    [unended] = [op for op in history if op.f == "final" and op.region == "eu-west"]
    assert unended.type == "info" and unended.records == ((DLSN(1, 0, 0), 0),)
    assert "the 0.05 s bound ran out" in unended.detail
    assert unended.extra["bound_s"] == 0.05
    assert [op.region for op in history if op.f == "final" and op.type == "ok"] == REGIONS[:2]
    report = check(history)
    assert {k: n for k, n in report.counts().items() if n} == {"read-unavailable": 1}
    [anomaly] = report.anomalies
    assert "eu-west: the library's final read of s did not end" in anomaly.detail


async def test_an_error_answered_ends_that_read_in_the_history_and_a_bug_fails_the_run(
    library: dict[tuple[str, str], list[Any]],
) -> None:
    library[("us-east", "s")] = [("1.0.0", 0), MetadataUnavailableError("no ZooKeeper")]
    file = io.StringIO()
    await final_reads(sends(file))
    history = read_history(file.getvalue().splitlines())
    first = next(op for op in history if op.f == "final")
    assert (first.region, first.type) == ("us-east", "info")
    assert "metadata_unavailable" in first.detail
    assert len([op for op in history if op.f == "final"]) == 3
    library[("us-east", "s")] = [StreamNotFoundError("no s")]  # the run made it: a bug
    with pytest.raises(StreamNotFoundError):
        await final_reads(Recorder(io.StringIO()))
