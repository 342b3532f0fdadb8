"""What a read proxy's clients hold of it at once, in all and per client: slots, how many
requests of one kind (pages, streamed tails) are served at once; unsent bytes, how much of
the answers built for them still waits to be taken; turns, one batch of a client's tails at a
time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import NoReturn

from core.errors import GlobelogError, OverCapacityError, QuotaExceededError
from region.admission.quotas import RefusalHolds, count_down


class Slots:
    """Requests of one kind served at once, at most `most`, and at most `per_client` of one
    client: one past the first is over_capacity, one past its client's share quota_exceeded
    (a client holding its share of long polls or tails does not take the others' slots).
    Either is held before it is answered (`RefusalHolds`: about a second, longer for a client
    with many refusals held), so a client that sends again at once, as many tails or long
    polls past the cap would, gets about `refusals_per_s_per_client` refusals a second, not a
    refusal per turn. The table of clients holds only those with a slot taken."""

    def __init__(self, what: str, most: int, per_client: int, holds: RefusalHolds) -> None:
        self.what = what
        self.holds = holds
        self.most = most
        self.per_client = per_client
        self.taken = 0
        self.by_client: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def slot(self, client: str) -> AsyncIterator[None]:
        held = self.by_client.get(client, 0)
        if self.taken >= self.most:
            await self.holds.hold(client)
            raise OverCapacityError(
                f"this read proxy has {self.taken} {self.what}, its most; retry later"
            )
        if held >= self.per_client:
            await self.holds.hold(client)
            raise QuotaExceededError(
                f"{client} has {held} {self.what} at this read proxy, a client's most; "
                "retry when one ends"
            )
        self.taken += 1
        self.by_client[client] = held + 1
        try:
            yield
        finally:
            self.taken -= 1
            count_down(self.by_client, client)


class UnsentBytes:
    """The bytes of answers a read proxy has built and holds until their clients take them (a
    page until its last slice is taken, a tail's lines while they are written): at most
    `most` in all and `per_client` of one client (pages of a client that reads slowly, or
    not at all, wait for it up to `send_timeout_s` each). A client already holding its share
    is refused quota_exceeded before its next page is read; a page that would take it past
    its share, or the proxy past `most`, is refused once built (quota_exceeded,
    over_capacity), unless its client (or the proxy) holds nothing yet: so one client holds
    at most its share or one page, and the proxy at most `most` or one page. A refusal is
    held first, as `Slots`' are. The table of clients holds only those holding bytes."""

    def __init__(self, most: int, per_client: int, holds: RefusalHolds) -> None:
        self.most = most
        self.per_client = per_client
        self.holds = holds
        self.used = 0
        self.by_client: dict[str, int] = {}

    def over(self, client: str) -> bool:
        """Whether `client` holds its share, or the proxy its most."""
        return self.by_client.get(client, 0) >= self.per_client or self.used >= self.most

    def refusal(self, client: str, size: int = 0) -> GlobelogError | None:
        """The refusal (not yet held) if `size` more bytes of `client`'s would pass its share
        or the proxy's most (size 0: if it is at them already), else None."""
        held = self.by_client.get(client, 0)
        if _passes(held, size, self.per_client):
            return QuotaExceededError(
                f"{client} has {held} bytes of answers not yet taken at this read proxy, "
                f"a client's most is {self.per_client}; read what was sent, then retry"
            )
        if _passes(self.used, size, self.most):
            return OverCapacityError(
                f"this read proxy holds {self.used} bytes of answers not yet taken by their "
                f"clients, its most is {self.most}; retry later"
            )
        return None

    async def refuse(self, client: str, refusal: GlobelogError) -> NoReturn:
        """Raises `refusal` once held (`RefusalHolds`)."""
        await self.holds.hold(client)
        raise refusal

    @contextlib.contextmanager
    def held(self, client: str, size: int) -> Iterator[None]:
        """`size` bytes of `client`'s held while the block runs (its answer is sent)."""
        self.used += size
        self.by_client[client] = self.by_client.get(client, 0) + size
        try:
            yield
        finally:
            self.used -= size
            left = self.by_client[client] - size
            if left:
                self.by_client[client] = left
            else:
                del self.by_client[client]


class ClientTurns:
    """One client's streamed tails send one batch at a time, in turn (first come, first
    served). Each batch is a slice of the loop's time (encoding up to 500 records, their
    write); a client with a hundred tails catching up would otherwise take a hundred slices
    of every turn of the loop, and every other client's request would wait behind them. In
    turn, a client takes one batch's worth whatever its number of tails, as the client with
    one does. The table holds only clients with a tail in a batch or waiting for one."""

    def __init__(self) -> None:
        self._clients: dict[str, tuple[asyncio.Lock, int]] = {}  # client -> (its turn, users)

    def __len__(self) -> int:
        return len(self._clients)

    @contextlib.asynccontextmanager
    async def turn(self, client: str) -> AsyncIterator[None]:
        lock, users = self._clients.get(client) or (asyncio.Lock(), 0)
        self._clients[client] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._clients[client]
            if users == 1:
                del self._clients[client]
            else:
                self._clients[client] = (lock, users - 1)


def _passes(held: int, size: int, most: int) -> bool:
    """Whether `size` more bytes on `held` would pass `most` (size 0: whether `held` is at it
    already); never while nothing is held, so that one answer of any size goes."""
    return held > 0 and (held + size > most if size else held >= most)
