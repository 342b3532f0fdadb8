"""The demo's region readers end: told to stop, within one poll; cancelled, even when aiohttp
turns the cancel into a timeout (they used to poll on, and `make demo` hung at exit)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from demo.services import _stop
from localcluster import tails as proxy_probes
from localcluster.tails import Received, tail_region

pytestmark = pytest.mark.unit


class HangingGet:
    """A request that never answers and, cancelled, raises TimeoutError as aiohttp may."""

    begun: asyncio.Event | None = None  # set once a request is waiting for its answer

    async def __aenter__(self) -> Any:
        if self.begun is not None:
            self.begun.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise TimeoutError from None

    async def __aexit__(self, *exc: object) -> None:
        return None


class Session:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.gets = 0

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def get(self, *args: Any, **kwargs: Any) -> HangingGet:
        self.gets += 1
        return HangingGet()


async def test_a_reader_cancelled_inside_a_request_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy_probes.aiohttp, "ClientSession", Session)
    begun = asyncio.Event()
    monkeypatch.setattr(HangingGet, "begun", begun)
    received = Received("us-west")
    reader = asyncio.create_task(
        tail_region("http://127.0.0.1:1", received, asyncio.Event(), "s", "ns")
    )
    await asyncio.wait_for(begun.wait(), 5)  # inside a request
    reader.cancel()  # once, as asyncio.run's clean-up does
    done, _ = await asyncio.wait([reader], timeout=5)
    assert reader in done and reader.cancelled()
    assert received.errors == 0  # the cancel was not taken for a failed poll


async def test_stop_cancels_what_does_not_end_within_its_grace() -> None:
    stop = asyncio.Event()

    async def obedient() -> None:
        await stop.wait()

    async def deaf() -> None:
        await asyncio.Event().wait()

    tasks = [asyncio.create_task(obedient()), asyncio.create_task(deaf())]
    stop.set()
    await asyncio.wait_for(_stop(tasks, 0.1), 5)
    assert tasks[0].done() and not tasks[0].cancelled()
    assert tasks[1].cancelled()
