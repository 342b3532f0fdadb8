"""Slots: how many requests of one kind (a read proxy's pages, its streamed tails) are served
at once, in all and per client."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from core.errors import OverCapacityError, QuotaExceededError
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
