"""The pool's dial while a link swallows handshakes: a fresh dial goes beside a hanging one
(DIAL_AGAIN_S apart, at most DIALS_MAX at once), the first connection wins, the others are
given up without backing the bookie off, and the whole dial still ends (I8). The connection itself is the seam here: a
stand-in whose opening hangs, fails or succeeds as each test scripts it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ledger.connections import bookie_pool
from ledger.connections.bookie_pool import BookieClientConfig, BookiePool
from ledger.connections.connection import ConnectionConfig
from ledger.errors import BookieUnavailableError

pytestmark = pytest.mark.unit

AGAIN_S = 0.05
CONNECT_TIMEOUT_S = 0.3


class Opened:
    """What a successful opening gives: closed or kept. Closing reports a lost connection
    to the pool's callback, as a connection given up mid-handshake may."""

    def __init__(self, n: int, on_closed: Any) -> None:
        self.n = n
        self.closed = False
        self.on_closed = on_closed

    @property
    def is_open(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True
        self.on_closed(self, BookieUnavailableError("connection lost while given up"))


class Openings:
    """Scripted outcomes, one per attempt: "hang" (until its connect timeout), "fail" or
    "ok"; records each attempt's start and whether it was cancelled."""

    def __init__(self, script: Iterator[str]) -> None:
        self.script = script
        self.started: list[float] = []
        self.cancelled = 0
        self.opened: list[Opened] = []
        self.in_flight = self.most_in_flight = 0

    async def open(
        self, bookie_id: str, address: str, config: Any, on_closed: Any, *rest: Any
    ) -> Opened:
        n = len(self.started)
        self.started.append(time.monotonic())
        outcome = next(self.script)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if outcome == "hang":
                await asyncio.sleep(config.connect_timeout_s)
                raise BookieUnavailableError(f"{bookie_id}: no connection (attempt {n})")
            if outcome == "fail":
                raise BookieUnavailableError(f"{bookie_id}: refused (attempt {n})")
            await asyncio.sleep(0)
            opened = Opened(n, on_closed)
            self.opened.append(opened)
            return opened
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1


@pytest.fixture
def openings(monkeypatch: pytest.MonkeyPatch) -> Openings:
    openings = Openings(iter(()))
    monkeypatch.setattr(bookie_pool, "DIAL_AGAIN_S", AGAIN_S)
    monkeypatch.setattr(bookie_pool.BookieConnection, "open", openings.open)
    return openings


def pool() -> BookiePool:
    connection = ConnectionConfig(connect_timeout_s=CONNECT_TIMEOUT_S)
    return BookiePool(lambda bookie: bookie, BookieClientConfig(connection=connection))


async def test_a_hanging_dial_gets_a_fresh_one_beside_it_and_the_first_connection_wins(
    openings: Openings,
) -> None:
    openings.script = iter(["hang", "ok"])
    started = time.monotonic()
    connection: Any = await pool().connection("b1")
    assert connection.n == 1, "the second dial's connection"
    assert len(openings.started) == 2
    assert openings.started[1] - started >= AGAIN_S * 0.9
    await asyncio.sleep(0)
    assert openings.cancelled == 1, "the hanging dial is given up"


async def test_a_few_dials_at_once_at_most_and_the_whole_dial_ends(openings: Openings) -> None:
    openings.script = iter(["hang"] * 100)
    started = time.monotonic()
    with pytest.raises(BookieUnavailableError, match="no connection"):
        await pool().connection("b1")
    took_s = time.monotonic() - started
    assert took_s < 2 * CONNECT_TIMEOUT_S + 1.0, took_s
    # a fresh dial every AGAIN_S up to DIALS_MAX at once, each ended by its own timeout
    assert openings.most_in_flight == bookie_pool.DIALS_MAX
    assert bookie_pool.DIALS_MAX <= len(openings.started) <= CONNECT_TIMEOUT_S / AGAIN_S + 1
    assert openings.cancelled == 0


async def test_a_refused_dial_fails_at_once_without_a_second(openings: Openings) -> None:
    openings.script = iter(["fail", "ok"])
    with pytest.raises(BookieUnavailableError, match="refused"):
        await pool().connection("b1")
    assert len(openings.started) == 1


async def test_a_connection_that_came_second_in_the_same_moment_is_closed(
    openings: Openings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two dials that both connect: one is kept, the other closed, none leaks."""
    gate, both_opened = asyncio.Event(), asyncio.Event()
    real_open = openings.open

    async def both_at_once(*args: Any) -> Opened:
        opened = await real_open(*args)
        if len(openings.opened) == 2:
            both_opened.set()
        await gate.wait()
        return opened

    monkeypatch.setattr(bookie_pool.BookieConnection, "open", both_at_once)
    openings.script = iter(["ok", "ok"])
    dialler = pool()
    dial = asyncio.create_task(dialler.connection("b1"))
    await asyncio.wait_for(both_opened.wait(), 5)
    gate.set()
    kept: Any = await dial
    assert [o.closed for o in openings.opened if o is not kept] == [True]
    assert not kept.closed
    assert dialler.is_available("b1"), "the given-up connection's loss backed the bookie off"
