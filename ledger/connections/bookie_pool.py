"""Connections to many bookies: one per bookie id, dialled lazily, redialled with backoff.

A bookie id is resolved to the address to dial at each dial, so a client in one region reaches
another region's bookies through its WAN route (`core.routes.PublishedTopology.address`). A
bookie whose dial failed, or whose connection failed, is not dialled again before its backoff
(`ledger.connections.backoff`) ends; meanwhile its requests fail at once with BookieUnavailableError.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from core import runtime
from core.errors import GlobelogError
from ledger.connections.backoff import BackoffPolicy, ReconnectState
from ledger.connections.connection import (
    REQUEST_TIMEOUT_S,
    V3_WIRE,
    BookieConnection,
    Clock,
    ConnectionConfig,
    Wire,
)
from ledger.errors import BookieUnavailableError, ClientClosedError, PoolFullError

BOOKIES_MAX = 4096  # distinct bookies one pool connects to; clusters have tens to hundreds
# A long-poll read waits up to its own timeout at the bookie; the client allows this much more
# for the answer to travel, so only a stuck bookie (not an idle ledger) times it out.
LONG_POLL_GRACE_S = REQUEST_TIMEOUT_S
CLOSE_TIMEOUT_S = 5.0  # aborted transports report closure on the next loop iterations
# A dial with no connection after this long gets a fresh one beside it (at most DIALS_MAX at
# once, each kept to its own timeout), within the dial's connect timeout overall: a cut link
# swallows a handshake, which then waits out its whole timeout though the link healed.
DIAL_AGAIN_S = 1.0
DIALS_MAX = 3

BookieResolver = Callable[[str], str]  # bookie id -> "host:port" to dial from this region


@dataclass(frozen=True, slots=True)
class BookieClientConfig:
    connection: ConnectionConfig = field(default_factory=ConnectionConfig)
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    bookies_max: int = BOOKIES_MAX
    long_poll_grace_s: float = LONG_POLL_GRACE_S

    def __post_init__(self) -> None:
        assert self.bookies_max > 0, self.bookies_max
        assert self.long_poll_grace_s > 0, self.long_poll_grace_s


class BookiePool:
    """Owns every connection and dial of one client in one protocol (`wire`); `close()` ends
    them all."""

    def __init__(
        self,
        resolve: BookieResolver,
        config: BookieClientConfig | None = None,
        rng: random.Random | None = None,
        clock: Clock | None = None,
        wire: Wire = V3_WIRE,
    ) -> None:
        self.config = config if config is not None else BookieClientConfig()
        self._resolve = resolve
        self._wire = wire
        self._rng = rng if rng is not None else runtime.new_rng()
        self._clock = clock if clock is not None else runtime.clock()
        self._connections: dict[str, BookieConnection] = {}
        self._dialling: dict[str, asyncio.Task[BookieConnection]] = {}
        # Only bookies that failed since their last answer; oldest dropped beyond the bound.
        self._failing: dict[str, ReconnectState] = {}
        self._retired_unknown_responses = 0
        self._closed = False

    @property
    def unknown_responses(self) -> int:
        """Responses dropped for an unknown txn id, over every connection so far."""
        live = sum(c.unknown_responses for c in self._connections.values())
        return self._retired_unknown_responses + live

    def is_available(self, bookie_id: str) -> bool:
        """False while the bookie is backing off after failures."""
        state = self._failing.get(bookie_id)
        return state is None or state.admits(self._clock())

    def answered(self, bookie_id: str) -> None:
        """The bookie answered a request (any status): it is healthy again."""
        if self._failing:
            self._failing.pop(bookie_id, None)

    def open_connection(self, bookie_id: str) -> BookieConnection | None:
        """The connection to `bookie_id` if one is open now (no dial, no wait)."""
        connection = self._connections.get(bookie_id)
        return connection if connection is not None and connection.is_open else None

    async def connection(self, bookie_id: str) -> BookieConnection:
        """The open connection to `bookie_id`, dialling it if there is none.

        BookieUnavailableError if the dial fails or the bookie is backing off.
        """
        connection = self._connections.get(bookie_id)
        if connection is not None and connection.is_open:
            return connection
        if self._closed:
            raise ClientClosedError(f"bookie {bookie_id}: the bookie client is closed")
        self._check_backoff(bookie_id)
        task = self._dialling.get(bookie_id)
        if task is None:
            task = self._start_dial(bookie_id)
        try:
            # Shielded: one caller's cancellation must not cancel the dial others await.
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled() and self._closed:
                raise ClientClosedError(f"bookie {bookie_id}: the bookie client closed") from None
            raise

    def _check_backoff(self, bookie_id: str) -> None:
        state = self._failing.get(bookie_id)
        now_s = self._clock()
        if state is not None and not state.admits(now_s):
            raise BookieUnavailableError(
                f"bookie {bookie_id}: unavailable after {state.failures} consecutive "
                f"failure(s); next attempt in {state.retry_at_s - now_s:.3f} s; "
                f"last error: {state.last_error}"
            )

    def _start_dial(self, bookie_id: str) -> asyncio.Task[BookieConnection]:
        if bookie_id not in self._connections and len(self._connections) >= self.config.bookies_max:
            raise PoolFullError(
                f"bookie {bookie_id}: {len(self._connections)} bookies connected; "
                f"the limit is {self.config.bookies_max}"
            )
        task = asyncio.create_task(self._dial(bookie_id), name=f"dial bookie {bookie_id}")
        self._dialling[bookie_id] = task

        def done(finished: asyncio.Task[BookieConnection]) -> None:
            if self._dialling.get(bookie_id) is finished:
                del self._dialling[bookie_id]
            if not finished.cancelled():
                finished.exception()  # retrieved: every caller may have been cancelled

        task.add_done_callback(done)
        return task

    async def _dial(self, bookie_id: str) -> BookieConnection:
        address = self._resolve(bookie_id)
        try:
            connection = await self._first_connection(bookie_id, address)
        except BookieUnavailableError as err:
            self._failed(bookie_id, err)
            raise
        self._connections[bookie_id] = connection
        return connection

    async def _first_connection(self, bookie_id: str, address: str) -> BookieConnection:
        """The first of the dials (DIAL_AGAIN_S apart, at most DIALS_MAX at once) to connect;
        the others are given up (a connection that came too, closed), and what a given-up
        one reports on closing is not the bookie's failure. No new dial starts later than
        the connect timeout after the first, and each ends by its own timeout: the whole
        ends within twice the connect timeout."""
        config = self.config.connection
        loop = asyncio.get_running_loop()
        given_up: set[asyncio.Task[BookieConnection]] = set()

        def attempt() -> asyncio.Task[BookieConnection]:
            def on_closed(connection: BookieConnection, error: GlobelogError | None) -> None:
                if task not in given_up:
                    self._on_closed(connection, error)

            opening = BookieConnection.open(bookie_id, address, config, on_closed, self._wire)
            task = asyncio.create_task(opening, name=f"connect to bookie {bookie_id}")
            return task

        again_until_s = loop.time() + config.connect_timeout_s - DIAL_AGAIN_S
        attempts = [attempt()]
        chosen: asyncio.Task[BookieConnection] | None = None
        error: BaseException | None = None
        try:
            while chosen is None and attempts:
                done, _ = await asyncio.wait(
                    attempts, timeout=DIAL_AGAIN_S, return_when=asyncio.FIRST_COMPLETED
                )
                for task in [t for t in attempts if t in done]:
                    attempts.remove(task)
                    if task.exception() is None:
                        chosen = chosen or task
                        if task is not chosen:
                            given_up.add(task)
                            task.result().close()  # connected as well: not needed
                    else:
                        error = task.exception()
                wanted = chosen is None and not done and len(attempts) < DIALS_MAX
                if wanted and loop.time() < again_until_s:
                    attempts.append(attempt())
        finally:
            for task in attempts:  # given up (or this dial was cancelled)
                given_up.add(task)
                if task.done() and not task.cancelled() and task.exception() is None:
                    task.result().close()
                task.cancel()
        if chosen is not None:
            return chosen.result()
        assert error is not None
        raise error

    def _on_closed(self, connection: BookieConnection, error: GlobelogError | None) -> None:
        if self._connections.get(connection.bookie_id) is connection:
            del self._connections[connection.bookie_id]
        self._retired_unknown_responses += connection.unknown_responses
        if error is not None:
            self._failed(connection.bookie_id, error)

    def _failed(self, bookie_id: str, error: GlobelogError) -> None:
        state = self._failing.get(bookie_id)
        if state is None:
            if len(self._failing) >= self.config.bookies_max:
                del self._failing[next(iter(self._failing))]
            state = self._failing[bookie_id] = ReconnectState(self.config.backoff, self._rng)
        state.failed(self._clock(), error)

    async def close(self) -> None:
        """Cancels every dial and closes every connection; requests in flight fail."""
        self._closed = True
        dials = list(self._dialling.values())
        for task in dials:
            task.cancel()
        await asyncio.gather(*dials, return_exceptions=True)
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            connection.close()
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await asyncio.gather(*(c.wait_closed() for c in connections))
