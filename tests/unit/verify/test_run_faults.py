"""The failover run heals every fault it applied however the run ends: a fault being applied
when a worker fails, a fault held when the run is interrupted; a heal that fails is reported
with its cause (the run fails, or an interrupt stays an interrupt). The deployment is a fake
at its seam (verify/run/deployment.py), its fault controls logging each call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from core.errors import ClusterError
from verify.history import load_history
from verify.run import nemesis, run
from verify.run.recorder import WorkerFailedError
from verify.run.run import RunConfig

pytestmark = pytest.mark.unit

RUN_BOUND_S = 10.0


class Controls:
    """The cluster's controls as the nemesis and the run call them, each call logged."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.paused = asyncio.Event()
        self.pause_never_settles = False  # the SIGSTOP is sent; the wait for it never ends
        self.failing_undos = 0  # how many resumes raise before one works
        self.exited: list[str] = []  # processes that stopped on their own

    async def fault(self, action: str, name: str) -> str:
        await asyncio.sleep(0)
        self.log.append(f"{action} {name}")
        if action == "pause":
            self.paused.set()
            if self.pause_never_settles:
                await asyncio.Event().wait()
        if action == "resume" and self.failing_undos:
            self.failing_undos -= 1
            raise ClusterError(f"cluster resume {name}: pid 7 is not running")
        return f"{action} {name} (pid 7)"

    async def pause(self, name: str) -> str:
        return await self.fault("pause", name)

    async def resume(self, name: str) -> str:
        return await self.fault("resume", name)

    async def heal(self) -> None:
        await asyncio.sleep(0)
        self.log.append("heal every partition")

    async def unslow(self) -> None:
        await asyncio.sleep(0)
        self.log.append("unslow every route")

    async def revive(self, said: Callable[[str], None]) -> None:
        await asyncio.sleep(0)
        for name in self.exited:
            self.log.append(f"revive {name}")
            said(f"{name} had exited (exitCode 4); restart {name}")
        self.exited = []


class FakeAdmin:
    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    async def __aenter__(self) -> FakeAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def create(self, stream: str) -> None:
        await asyncio.sleep(0)


@pytest.fixture
def controls(monkeypatch: pytest.MonkeyPatch) -> Controls:
    found = Controls()
    monkeypatch.setattr(nemesis, "QUIET_S", 0.0)
    monkeypatch.setattr(nemesis, "HOLD_S", {"pause-bookie": 0.05})
    monkeypatch.setattr(run, "AFTER_LAST_HEAL_S", 0.0)
    monkeypatch.setattr(run, "tail", idle_worker)
    monkeypatch.setattr(run, "produce", idle_worker)
    return found


async def idle_worker(*args: Any) -> None:
    """A tailing reader's or producer's fake: runs until told to stop (its last argument)."""
    stop: asyncio.Event = args[-1]
    await stop.wait()


class FakeDeployment:
    """Two regions, one bookie, proxies nobody reaches: the run's workers are fakes."""

    def __init__(self, controls: Controls) -> None:
        self.topology = SimpleNamespace(
            region_names=["r1", "r2"], bookies=[SimpleNamespace(name="b1")]
        )
        self.faults = controls

    def in_region(self, region: str, work: Any) -> Any:
        return work

    def write_urls(self, region: str) -> list[str]:
        return ["http://127.0.0.1:1"]

    def client(self, *_: Any) -> FakeAdmin:
        return FakeAdmin()

    def http(self) -> FakeAdmin:
        return FakeAdmin()


async def start(tmp_path: Path, lines: list[str], controls: Controls) -> asyncio.Task[Any]:
    cfg = RunConfig(seed=1, seconds=0.0, faults=("pause-bookie",), out=tmp_path)
    file = (tmp_path / "history.jsonl").open("w", encoding="utf-8")

    async def work() -> None:
        try:
            await run.failover_run(FakeDeployment(controls), cfg, file, lines.append)  # type: ignore[arg-type]
        finally:
            file.close()

    return asyncio.create_task(work())


async def test_a_fault_being_applied_when_a_worker_fails_is_healed_at_the_end(
    controls: Controls, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    controls.pause_never_settles = True

    async def fails_once_paused(*args: Any) -> None:
        await controls.paused.wait()
        raise KeyError("records")

    monkeypatch.setattr(run, "produce", fails_once_paused)
    with pytest.raises(WorkerFailedError, match="w-r1-s0 failed: KeyError"):
        await asyncio.wait_for(await start(tmp_path, [], controls), RUN_BOUND_S)
    assert controls.log[0] == "pause b1"
    assert "resume b1" in controls.log, "the process was left stopped"
    assert controls.log[-2:] == ["heal every partition", "unslow every route"]
    heals = [op for op in load_history(tmp_path / "history.jsonl") if op.f == "heal"]
    assert [(op.type, op.value) for op in heals] == [("info", "pause b1")]


async def test_a_heal_failing_as_the_run_is_interrupted_is_printed_and_the_interrupt_stays(
    controls: Controls, tmp_path: Path
) -> None:
    controls.failing_undos = 1
    lines: list[str] = []
    running = await start(tmp_path, lines, controls)
    await asyncio.wait_for(controls.paused.wait(), RUN_BOUND_S)
    await asyncio.sleep(0.01)  # the fault is held
    running.cancel()  # what Ctrl-C does to asyncio.run's main task
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, RUN_BOUND_S)
    assert controls.log == ["pause b1", "resume b1", "heal every partition", "unslow every route"]
    [printed] = [line for line in lines if "could not heal" in line]
    assert "heal of pause b1: ClusterError: cluster resume b1: pid 7 is not running" in printed
    history = load_history(tmp_path / "history.jsonl")
    [heal] = [op for op in history if op.f == "heal"]
    assert heal.type == "fail" and "pid 7 is not running" in heal.detail


async def test_a_heal_that_fails_fails_the_run_with_its_cause_and_is_tried_again(
    controls: Controls, tmp_path: Path
) -> None:
    controls.failing_undos = 2
    with pytest.raises(WorkerFailedError) as failed:
        await asyncio.wait_for(await start(tmp_path, [], controls), RUN_BOUND_S)
    assert [who for who, _ in failed.value.causes] == ["nemesis", "heal"]
    assert "nemesis failed: HealFailedError: heal of pause b1: ClusterError" in str(failed.value)
    for _, cause in failed.value.causes:
        assert isinstance(cause.__cause__, ClusterError)
    assert controls.log.count("resume b1") == 2
    assert controls.log[-2:] == ["heal every partition", "unslow every route"]


async def test_an_interrupt_as_a_worker_fails_stays_an_interrupt_and_the_fault_is_healed(
    controls: Controls, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async def fails_as_it_is_stopped(*args: Any) -> None:
        try:
            await args[-1].wait()
        except asyncio.CancelledError:
            raise KeyError("records") from None

    monkeypatch.setattr(run, "produce", fails_as_it_is_stopped)
    running = await start(tmp_path, [], controls)
    await asyncio.wait_for(controls.paused.wait(), RUN_BOUND_S)
    running.cancel()  # Ctrl-C, while the fault is held
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, RUN_BOUND_S)
    assert controls.log == ["pause b1", "resume b1", "heal every partition", "unslow every route"]


async def test_a_process_that_exited_on_its_own_is_started_again_after_the_heal(
    controls: Controls, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As the deployment's supervisor does: a bookie that stopped itself (BookKeeper's
    re-registration meeting its own node) is started again once no fault holds anything
    down, and the history says so."""
    controls.exited = ["b2"]

    async def final_reads_never_end(*args: Any) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(run, "proxy_final_reads", final_reads_never_end)
    running = await start(tmp_path, [], controls)
    async with asyncio.timeout(RUN_BOUND_S):
        while "revive b2" not in controls.log:  # noqa: ASYNC110 - the fake logs, no event
            await asyncio.sleep(0.01)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, RUN_BOUND_S)
    assert controls.log[:3] == ["pause b1", "resume b1", "revive b2"]
    history = load_history(tmp_path / "history.jsonl")
    [revived] = [op for op in history if op.f == "revive"]
    assert revived.type == "info" and revived.value == "b2"
    assert "exitCode 4" in revived.detail
