"""Work run beside its callers (core/background.py): kept until done, failures logged with
what they were, and a close that waits up to its bound and then cancels what is left (I8)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from core.background import Background


async def test_work_runs_past_its_caller_and_close_waits_for_it() -> None:
    done: list[str] = []
    background = Background()

    async def work() -> None:
        await asyncio.sleep(0.05)
        done.append("tidied")

    background.run(work(), "tidying")
    assert len(background) == 1
    await background.close(timeout_s=5.0)
    assert done == ["tidied"] and len(background) == 0


async def test_a_failure_is_logged_with_what_it_was(caplog: pytest.LogCaptureFixture) -> None:
    background = Background()

    async def work() -> None:
        raise ValueError("the store said no")

    with caplog.at_level(logging.ERROR, logger="core.background"):
        background.run(work(), "deleting ledger 7")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    assert len(background) == 0
    assert [r.getMessage() for r in caplog.records] == ["deleting ledger 7 failed"]


async def test_close_cancels_what_outlasts_its_bound() -> None:
    background = Background()
    cancelled = asyncio.Event()

    async def stuck() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    background.run(stuck(), "a delete that never answers")
    loop = asyncio.get_running_loop()
    began = loop.time()
    await background.close(timeout_s=0.1)
    assert cancelled.is_set() and len(background) == 0
    assert 0.09 <= loop.time() - began < 2.0
